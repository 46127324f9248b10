'use strict'
// Reports the installed SDK versions; needs no server.

const { run } = require('./_common')

async function scenario() {
  const e2b = require('e2b')
  const ci = require('@e2b/code-interpreter')
  return { modules: [typeof e2b.Sandbox, typeof ci.Sandbox] }
}

run(scenario)
