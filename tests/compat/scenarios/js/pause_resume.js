'use strict'
// Pause and resume (issue 18): pause({keepMemory: true}) freezes (a running `sleep` and the
// files survive connect), a second pause answers false; pause({keepMemory: false}) keeps the
// files only (connect cold-boots: the file is there, the `sleep` is not, same access token).

const { Sandbox } = require('e2b')
const { attempt, commandResult, infoDict, run } = require('./_common')

// Runs inside the sandbox, in its own pid namespace: pgrep sees the sandbox's processes only.
const PROBE =
  'cat /home/user/note.txt; echo; pgrep -x sleep >/dev/null && echo sleeping || echo no-sleep'

async function scenario() {
  const out = {}
  const sbx = await Sandbox.create('base', { timeoutMs: 300_000 })
  const sandboxId = sbx.sandboxId
  out.sandbox_id = sandboxId
  try {
    await sbx.files.write('/home/user/note.txt', 'kept')
    await sbx.commands.run('sleep 1000', { background: true, timeoutMs: 0 })

    out.pause_memory = await sbx.pause({ keepMemory: true })
    out.info_memory = infoDict(await Sandbox.getInfo(sandboxId))
    out.running_memory = await sbx.isRunning()
    out.pause_again = await attempt(() => sbx.pause({ keepMemory: true }))
    const resumed = await Sandbox.connect(sandboxId)
    out.probe_memory = commandResult(await resumed.commands.run(PROBE))

    out.pause_disk = await resumed.pause({ keepMemory: false })
    out.info_disk = infoDict(await Sandbox.getInfo(sandboxId))
    out.running_disk = await resumed.isRunning()
    out.pause_disk_again = await attempt(() => resumed.pause({ keepMemory: false }))
    const cold = await Sandbox.connect(sandboxId)
    out.cold_id = cold.sandboxId
    out.probe_disk = commandResult(await cold.commands.run(PROBE))
    out.info_after = infoDict(await cold.getInfo())
    out.token_kept = cold.envdAccessToken === sbx.envdAccessToken
  } finally {
    out.cleanup = await attempt(() => Sandbox.kill(sandboxId))
  }
  return out
}

run(scenario)
