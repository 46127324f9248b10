'use strict'
// Control-plane lifecycle: create → run → info → list → setTimeout → connect → kill.
// Argument: a random tag stored as `metadata.suite` so the list filters see only this run.

const { Sandbox } = require('e2b')
const { attempt, commandResult, infoDict, listAll, now, run } = require('./_common')

async function scenario([tag]) {
  const out = { tag }
  const sbx = await Sandbox.create('base', { envs: { FOO: 'bar' }, metadata: { suite: tag } })
  const sandboxId = sbx.sandboxId
  out.sandbox_id = sandboxId
  try {
    out.echo = commandResult(await sbx.commands.run('echo hi'))
    out.echo_env = commandResult(await sbx.commands.run('echo $FOO'))
    out.info = infoDict(await sbx.getInfo())
    out.info_static = infoDict(await Sandbox.getInfo(sandboxId))

    const byTag = await listAll(Sandbox, { query: { metadata: { suite: tag } } })
    out.list_by_metadata = byTag.map(infoDict)
    const running = await listAll(Sandbox, { query: { state: ['running'] } })
    out.list_running_ids = running.map((item) => item.sandboxId)
    const paused = await listAll(Sandbox, {
      query: { metadata: { suite: tag }, state: ['paused'] },
    })
    out.list_paused_by_metadata_ids = paused.map((item) => item.sandboxId)

    out.set_timeout_before = now()
    await sbx.setTimeout(120_000)
    out.set_timeout_after = now()
    out.info_after_timeout = infoDict(await sbx.getInfo())

    const connected = await Sandbox.connect(sandboxId)
    out.connected_id = connected.sandboxId
    out.connected_echo = commandResult(await connected.commands.run('echo connected'))
    out.is_running_before_kill = await sbx.isRunning()

    out.kill = await sbx.kill()
    out.is_running_after_kill = await sbx.isRunning()
    const after = await listAll(Sandbox, { query: { metadata: { suite: tag } } })
    out.list_after_kill_ids = after.map((item) => item.sandboxId)
  } finally {
    out.cleanup = await attempt(() => Sandbox.kill(sandboxId))
  }
  return out
}

run(scenario)
