'use strict'
// `allowInternetAccess` as the SDK reads it back: one sandbox created with the SDK's default
// flag, one with `allowInternetAccess: false`; `getInfo` of each, then kill both.

const { Sandbox } = require('e2b')
const { attempt, run } = require('./_common')

async function scenario() {
  const out = {}
  const byDefault = await Sandbox.create('base')
  try {
    const off = await Sandbox.create('base', { allowInternetAccess: false })
    try {
      out.default = (await byDefault.getInfo()).allowInternetAccess
      out.default_static = (await Sandbox.getInfo(byDefault.sandboxId)).allowInternetAccess
      out.off = (await off.getInfo()).allowInternetAccess
    } finally {
      await attempt(() => off.kill())
    }
  } finally {
    await attempt(() => byDefault.kill())
  }
  return out
}

run(scenario)
