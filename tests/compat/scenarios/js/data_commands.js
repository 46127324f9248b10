'use strict'
// Commands on the data plane (issue 3): background handles, env layering, cwd, users, stdin,
// list, connect from a second client, kill of the whole process group, timeouts, streamed
// callbacks, non-zero exits, late connect, and disconnect that leaves the process running.

const { Sandbox } = require('e2b')
const { attempt, commandResult, describeError, run } = require('./_common')
const { outcome, poll, recorder } = require('./_data')

const groupScript = (pidfile) => `sleep 1000 & echo $! > ${pidfile}; wait`

async function gone(sbx, pid) {
  const probe = await sbx.commands.run(`cat /proc/${pid}/stat 2>/dev/null || echo gone`, {
    user: 'root',
  })
  const text = probe.stdout.trim()
  const state = text.split(') ').pop()
  return text === 'gone' || state.startsWith('Z')
}

async function pidfile(sbx, path) {
  return (await poll(async () => (await sbx.files.read(path)).trim(), 10)) || ''
}

async function waitResult(handle) {
  return commandResult(await handle.wait())
}

async function scenario() {
  const out = {}
  const sbx = await Sandbox.create('base', { envs: { SBX_ONLY: 'sandbox', BOTH: 'sandbox' } })
  try {
    const cmd = sbx.commands

    // --- env layering, cwd and users on background handles
    let handle = await cmd.run('echo "$SBX_ONLY $BOTH $CMD_ONLY"', {
      background: true,
      envs: { BOTH: 'command', CMD_ONLY: 'x' },
    })
    out.bg_envs = await outcome(() => waitResult(handle))
    out.envs_after = commandResult(await cmd.run('echo "$SBX_ONLY ${BOTH} ${CMD_ONLY:-unset}"'))
    handle = await cmd.run('pwd', { background: true, cwd: '/tmp' })
    out.bg_cwd = await outcome(() => waitResult(handle))
    out.missing_cwd = await outcome(() => cmd.run('pwd', { cwd: '/nonexistent/dir' }))
    handle = await cmd.run('id -un; id -u', { background: true, user: 'root' })
    out.bg_root = await outcome(() => waitResult(handle))
    handle = await cmd.run('id -un; id -u', { background: true, user: 'user' })
    out.bg_user = await outcome(() => waitResult(handle))

    // --- stdin on: sendStdin twice (commands and handle), then closeStdin → EOF
    let rec = recorder()
    handle = await cmd.run('cat; echo eof', { background: true, stdin: true, ...rec })
    await cmd.sendStdin(handle.pid, 'hello ')
    await handle.sendStdin('world\n')
    out.stdin_echo_seen = Boolean(await poll(() => rec.stdout().includes('hello world\n'), 10))
    out.close_stdin = await attempt(() => handle.closeStdin())
    out.stdin_on = await outcome(() => waitResult(handle))

    // --- stdin off (the default): the process reads EOF at once; sendStdin is refused
    out.stdin_off = commandResult(await cmd.run('cat; echo eof'))
    handle = await cmd.run('sleep 30', { background: true, stdin: false })
    out.send_stdin_without_stdin = await attempt(() => cmd.sendStdin(handle.pid, 'x'))
    out.close_stdin_without_stdin = await attempt(() => cmd.closeStdin(handle.pid))
    await cmd.kill(handle.pid)
    await handle.disconnect()

    // --- commands.list shows a running process
    const sleeper = await cmd.run('sleep 300', { background: true })
    out.list = (await cmd.list())
      .filter((p) => p.pid === sleeper.pid)
      .map((p) => ({ pid: p.pid, cmd: p.cmd, args: p.args, cwd: p.cwd }))

    // --- kill: true, the stream ends with an exit error, the whole group dies
    handle = await cmd.run(groupScript('/tmp/kill-child.pid'), { background: true })
    let child = await pidfile(sbx, '/tmp/kill-child.pid')
    out.kill_child_pid = child
    out.kill_child_alive_before = Boolean(child) && !(await gone(sbx, child))
    out.kill = await cmd.kill(handle.pid)
    out.kill_wait = await outcome(() => waitResult(handle))
    out.kill_child_gone = Boolean(child) && Boolean(await poll(() => gone(sbx, child), 10))
    out.kill_again = await cmd.kill(handle.pid)
    out.kill_unknown = await cmd.kill(999999)
    out.kill_sleeper = await cmd.kill(sleeper.pid)
    await sleeper.disconnect()

    // --- timeout = process lifetime, TimeoutError, and the group dies with it
    handle = await cmd.run(groupScript('/tmp/timeout-child.pid'), {
      background: true,
      timeoutMs: 3000,
    })
    child = await pidfile(sbx, '/tmp/timeout-child.pid')
    out.timeout_wait = await outcome(() => waitResult(handle))
    out.timeout_child_gone = Boolean(child) && Boolean(await poll(() => gone(sbx, child), 10))
    out.timeout_in_list = (await cmd.list()).some((p) => p.pid === handle.pid)

    // --- callbacks streamed as produced (background, stdout and stderr)
    rec = recorder()
    handle = await cmd.run('echo one; echo e1 >&2; sleep 1.5; echo two; echo e2 >&2', {
      background: true,
      ...rec,
    })
    const streamWait = await outcome(() => waitResult(handle))
    streamWait.t = rec.chunks.length ? rec.chunks[rec.chunks.length - 1].t : null
    out.stream = { wait: streamWait, chunks: rec.chunks }

    // --- non-zero exit → CommandExitError with stdout, stderr and the code
    out.exit_error = await attempt(() => cmd.run('echo out; echo err >&2; exit 3'))
    handle = await cmd.run('echo bg-out; exit 4', { background: true })
    out.exit_error_bg = await outcome(() => handle.wait())

    // --- late connect: the exit status of a process that ended while nobody listened
    handle = await cmd.run('sleep 0.5; exit 7', { background: true })
    const latePid = handle.pid
    await handle.disconnect()
    out.late_exited = Boolean(
      await poll(async () => (await cmd.list()).every((p) => p.pid !== latePid), 10),
    )
    out.late_connect = await outcome(async () => (await cmd.connect(latePid)).wait())
    out.connect_unknown = await attempt(() => cmd.connect(999999))

    // --- disconnect never kills: the process finishes its work afterwards
    handle = await cmd.run('sleep 1; echo finished > /tmp/after-disconnect', { background: true })
    await handle.disconnect()
    out.disconnect_running = (await cmd.list()).some((p) => p.pid === handle.pid)
    out.after_disconnect = await poll(() => sbx.files.read('/tmp/after-disconnect'), 15)

    // --- connect from a second client object; it drives stdin and gets the output and end
    handle = await cmd.run('read line; echo got $line; exit 5', { background: true, stdin: true })
    const pid = handle.pid
    await handle.disconnect()
    const other = await Sandbox.connect(sbx.sandboxId)
    rec = recorder()
    const connected = await other.commands.connect(pid, { ...rec })
    await other.commands.sendStdin(pid, 'over-there\n')
    out.second_client = {
      pid: connected.pid,
      wait: await outcome(() => waitResult(connected)),
      expected_pid: pid,
    }
  } catch (err) {
    out.scenario_error = { ...describeError(err), cause: String(err && err.cause), stack: String(err && err.stack) }
  } finally {
    out.cleanup = await attempt(() => sbx.kill())
  }
  return out
}

run(scenario)
