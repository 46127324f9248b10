'use strict'
// Shared helpers for the JS scenario scripts. `require('e2b')` resolves through NODE_PATH to the
// pinned client's node_modules; nothing from Sandgate is available here.

const MAX_PAGES = 50

function sdkVersions() {
  const found = {}
  for (const pkg of ['e2b', '@e2b/code-interpreter']) {
    try {
      found[pkg] = require(`${pkg}/package.json`).version
    } catch {
      found[pkg] = null
    }
  }
  return found
}

function describeError(err) {
  const classes = []
  for (let proto = Object.getPrototypeOf(err); proto; proto = Object.getPrototypeOf(proto)) {
    if (proto.constructor && proto.constructor.name) classes.push(proto.constructor.name)
  }
  const described = {
    class: err && err.constructor ? err.constructor.name : typeof err,
    name: err && err.name,
    classes,
    message: err && err.message !== undefined ? err.message : String(err),
  }
  for (const attr of ['exitCode', 'stdout', 'stderr', 'error']) {
    if (err && err[attr] !== undefined) described[attr] = err[attr]
  }
  return described
}

async function attempt(action) {
  try {
    return { ok: true, value: await action() }
  } catch (err) {
    return { ok: false, error: describeError(err) }
  }
}

function commandResult(result) {
  return {
    stdout: result.stdout,
    stderr: result.stderr,
    exit_code: result.exitCode,
    error: result.error === undefined ? null : result.error,
  }
}

function iso(moment) {
  return moment ? new Date(moment).toISOString() : null
}

// Field names match the Python scenarios' output so tests assert both alike.
function infoDict(info) {
  return {
    sandbox_id: info.sandboxId,
    template_id: info.templateId,
    name: info.name === undefined ? null : info.name,
    metadata: info.metadata || {},
    started_at: iso(info.startedAt),
    end_at: iso(info.endAt),
    state: info.state,
    cpu_count: info.cpuCount,
    memory_mb: info.memoryMB,
    envd_version: info.envdVersion,
  }
}

async function listAll(Sandbox, opts) {
  const paginator = Sandbox.list(opts)
  const items = []
  for (let page = 0; page < MAX_PAGES && paginator.hasNext; page++) {
    items.push(...(await paginator.nextItems()))
  }
  return items
}

function now() {
  return Date.now() / 1000
}

// Runs a scenario and prints its JSON result as the last line of stdout. An unexpected error
// prints its stack on stderr and exits with status 1.
// Exits once the result is written: an SDK call that failed may leave its request timer
// armed (runCode skips clearTimeout when the server answers an error), which would keep Node
// alive for the whole request timeout after the scenario is done.
function run(scenario) {
  scenario(process.argv.slice(2)).then(
    (result) => {
      result.versions = sdkVersions()
      process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(0))
    },
    (err) => {
      process.stderr.write(`${(err && err.stack) || err}\n`, () => process.exit(1))
    },
  )
}

module.exports = { attempt, commandResult, describeError, infoDict, iso, listAll, now, run }
