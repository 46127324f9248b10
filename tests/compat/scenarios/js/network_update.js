'use strict'
// `updateNetwork` on a running sandbox: a host the create did not allow becomes reachable, a
// host beyond the operator's ceiling is refused, and an empty update closes it again.
// Arguments: the URL to fetch (plain HTTP through the proxy) and its host.

const { Sandbox } = require('e2b')
const { attempt, run } = require('./_common')

async function scenario([url, host]) {
  const out = {}
  const sandbox = await Sandbox.create('base')
  const fetch = async () =>
    (await sandbox.commands.run(`curl -s -o /dev/null -w '%{http_code}' ${url}`)).stdout
  try {
    out.before = await fetch()
    await sandbox.updateNetwork({ allowOut: [host] })
    out.opened = await fetch()
    const network = (await sandbox.getInfo()).network
    out.info_allow_out = (network && network.allowOut) || []
    out.beyond_ceiling = await attempt(() =>
      sandbox.updateNetwork({ allowOut: [host, 'example.com'] }),
    )
    out.still_open = await fetch()
    await Sandbox.updateNetwork(sandbox.sandboxId, {})
    out.closed = await fetch()
    out.unknown_sandbox = await attempt(() =>
      Sandbox.updateNetwork('nosuchsandbox0000000000000', {}),
    )
  } finally {
    await attempt(() => sandbox.kill())
  }
  return out
}

run(scenario)
