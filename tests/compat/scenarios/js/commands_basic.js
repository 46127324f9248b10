'use strict'
// Foreground commands: output capture, cwd, env layering, users, timeouts and streaming.

const { Sandbox } = require('e2b')
const { attempt, commandResult, describeError, run } = require('./_common')

// Quick commands run back to back: each must return its own output (no lost data events).
const REPEATS = 30

async function scenario() {
  const out = {}
  const sbx = await Sandbox.create('base', { envs: { FOO: 'sandbox' } })
  try {
    const cmd = sbx.commands
    out.true = commandResult(await cmd.run('true'))
    out.stderr = commandResult(await cmd.run('echo out; echo err >&2'))
    out.cwd = commandResult(await cmd.run('pwd', { cwd: '/tmp' }))
    out.default_cwd = commandResult(await cmd.run('pwd'))
    out.env_override = commandResult(await cmd.run('echo $FOO', { envs: { FOO: 'command' } }))
    out.env_sandbox = commandResult(await cmd.run('echo $FOO'))
    out.env_command_only = commandResult(await cmd.run('echo $BAR', { envs: { BAR: 'once' } }))
    out.env_not_kept = commandResult(await cmd.run('echo "${BAR:-unset}"'))
    out.root_uid = commandResult(await cmd.run('id -u', { user: 'root' }))
    out.root_whoami = commandResult(await cmd.run('whoami', { user: 'root' }))
    out.default_whoami = commandResult(await cmd.run('whoami'))
    out.default_uid = commandResult(await cmd.run('id -u'))
    out.default_home = commandResult(await cmd.run('echo $HOME'))
    out.repeat_mismatches = []
    for (let i = 0; i < REPEATS; i++) {
      const result = await cmd.run(`echo ${i}`)
      if (result.stdout !== `${i}\n`) out.repeat_mismatches.push({ i, ...commandResult(result) })
    }

    let started = performance.now()
    try {
      await cmd.run('sleep 10', { timeoutMs: 2000 })
      out.timeout = { ok: true }
    } catch (err) {
      out.timeout = { ok: false, error: describeError(err) }
    }
    out.timeout_elapsed = (performance.now() - started) / 1000

    const chunks = []
    started = performance.now()
    const result = await cmd.run('echo one; sleep 1.5; echo two', {
      onStdout: (data) => {
        chunks.push({ t: (performance.now() - started) / 1000, data })
      },
    })
    out.stream = {
      result: commandResult(result),
      chunks,
      end: (performance.now() - started) / 1000,
    }
  } finally {
    out.cleanup = await attempt(() => sbx.kill())
  }
  return out
}

run(scenario)
