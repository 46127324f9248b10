'use strict'
// PTY sessions (issue 3): create with a size, input, resize (seen by `stty size`), raw colour
// sequences, list, kill, and reconnect by pid from a second handle.

const { Sandbox } = require('e2b')
const { attempt, commandResult, describeError, run } = require('./_common')
const { outcome, poll } = require('./_data')

const enc = new TextEncoder()
const SIZE_PROBE = enc.encode('echo "SIZE:$(stty size):END"\n')
const COLOUR_PROBE = enc.encode("printf '\\033[31mR%sD\\033[0m\\n' E\n")

function terminal() {
  const parts = []
  const dec = new TextDecoder()
  return {
    onData: (data) => {
      parts.push(dec.decode(data, { stream: true }))
    },
    text: () => parts.join(''),
  }
}

async function scenario() {
  const out = {}
  const sbx = await Sandbox.create('base')
  try {
    let term = terminal()
    let handle = await sbx.pty.create({ rows: 24, cols: 80, timeoutMs: 0, onData: term.onData })
    out.listed = (await sbx.commands.list()).some((p) => p.pid === handle.pid)
    const size = (rows, cols) => term.text().includes(`SIZE:${rows} ${cols}:END`)
    await sbx.pty.sendInput(handle.pid, SIZE_PROBE)
    out.initial_size = Boolean(await poll(() => size(24, 80), 15))
    await sbx.pty.resize(handle.pid, { rows: 40, cols: 132 })
    await sbx.pty.sendInput(handle.pid, SIZE_PROBE)
    out.resized = Boolean(await poll(() => size(40, 132), 15))
    await sbx.pty.sendInput(handle.pid, COLOUR_PROBE)
    out.colour = Boolean(await poll(() => term.text().includes('\x1b[31mRED\x1b[0m'), 15))
    await sbx.pty.sendInput(handle.pid, enc.encode('echo TERM=$TERM USER=$(whoami)\n'))
    out.env = Boolean(
      await poll(() => term.text().includes('TERM=xterm-256color USER=user'), 15),
    )
    out.kill = await sbx.pty.kill(handle.pid)
    out.kill_wait = await outcome(async () => commandResult(await handle.wait()))
    out.kill_again = await sbx.pty.kill(handle.pid)

    // Reconnect by pid: the first handle disconnects, a new one receives live output.
    handle = await sbx.pty.create({ rows: 24, cols: 80, timeoutMs: 0, onData: () => {} })
    const pid = handle.pid
    await handle.disconnect()
    term = terminal()
    const reconnected = await sbx.pty.connect(pid, { timeoutMs: 0, onData: term.onData })
    await sbx.pty.sendInput(pid, enc.encode('echo RE-$((6*7))\n'))
    out.reconnected_output = Boolean(await poll(() => term.text().includes('RE-42'), 15))
    await sbx.pty.sendInput(pid, enc.encode('exit\n'))
    out.exit_wait = await outcome(async () => commandResult(await reconnected.wait()))
  } catch (err) {
    out.scenario_error = { ...describeError(err), cause: String(err && err.cause), stack: String(err && err.stack) }
  } finally {
    out.cleanup = await attempt(() => sbx.kill())
  }
  return out
}

run(scenario)
