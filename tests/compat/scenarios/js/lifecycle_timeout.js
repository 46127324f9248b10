'use strict'
// Lifecycle at the timeout (issue 18), each deadline brought to now with setTimeout(1000):
// {onTimeout: 'pause', autoResume: true}: paused by the reaper (memory kept); a request without
// its token (envd's /health) does not wake it; an HTTP request to its port 8000 with its traffic
// token does, answered by the server started before the pause. {onTimeout: 'kill'}: killed.
// {onTimeout: {action: 'pause', keepMemory: false}}: paused to disk; connect brings it back.

const http = require('node:http')
const { Sandbox } = require('e2b')
const { attempt, run } = require('./_common')
const { poll } = require('./_data')

const PORT = 8000
const WAIT_S = 60

function get(base, path, headers) {
  const url = new URL(path, base)
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'GET', headers }, (res) => {
      const parts = []
      res.on('data', (c) => parts.push(c))
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(parts).toString() }))
    })
    req.on('error', reject)
    req.end()
  })
}

async function state(sandboxId) {
  return (await Sandbox.getInfo(sandboxId)).state
}

async function scenario() {
  const out = {}
  const base = process.env.E2B_SANDBOX_URL
  const made = []
  try {
    const woken = await Sandbox.create('base', {
      timeoutMs: 300_000,
      lifecycle: { onTimeout: 'pause', autoResume: true },
    })
    made.push(woken.sandboxId)
    const killed = await Sandbox.create('base', {
      timeoutMs: 300_000,
      lifecycle: { onTimeout: 'kill' },
    })
    made.push(killed.sandboxId)
    const stored = await Sandbox.create('base', {
      timeoutMs: 300_000,
      lifecycle: { onTimeout: { action: 'pause', keepMemory: false } },
    })
    made.push(stored.sandboxId)

    await woken.files.write('/home/user/www/hello.txt', 'served after waking')
    await woken.commands.run(`python3 -m http.server ${PORT}`, {
      background: true,
      cwd: '/home/user/www',
      timeoutMs: 0,
    })
    const auth = {
      Host: woken.getHost(PORT),
      'E2B-Traffic-Access-Token': woken.trafficAccessToken || '',
    }
    out.served_before = Boolean(
      await poll(async () => (await get(base, '/hello.txt', auth)).status === 200, 20),
    )
    await stored.files.write('/home/user/note.txt', 'kept on disk')
    const info = await woken.getInfo()
    out.lifecycle_info = {
      on_timeout: info.lifecycle ? info.lifecycle.onTimeout : null,
      auto_resume: info.lifecycle ? info.lifecycle.autoResume : null,
    }
    for (const sbx of [woken, killed, stored]) await sbx.setTimeout(1000)

    out.woken_paused = await poll(async () => (await state(woken.sandboxId)) === 'paused', WAIT_S)
    const health = await get(base, '/health', { Host: woken.getHost(49983) })
    out.woken_health_without_token = health.status
    out.woken_state_after_health = await state(woken.sandboxId)
    const started = performance.now()
    const response = await get(base, '/hello.txt', auth)
    out.woken_response = { status: response.status, body: response.body }
    out.woken_elapsed = (performance.now() - started) / 1000
    out.woken_state = await state(woken.sandboxId)

    out.killed_gone = Boolean(
      await poll(async () => !(await attempt(() => Sandbox.getInfo(killed.sandboxId))).ok, WAIT_S),
    )
    out.killed_info = await attempt(() => state(killed.sandboxId))
    out.stored_paused = await poll(async () => (await state(stored.sandboxId)) === 'paused', WAIT_S)
    out.stored_is_running = await stored.isRunning()
    const back = await Sandbox.connect(stored.sandboxId)
    out.stored_note = await back.files.read('/home/user/note.txt')
    out.stored_state = await state(stored.sandboxId)
  } finally {
    out.cleanup = []
    for (const id of made) out.cleanup.push(await attempt(() => Sandbox.kill(id)))
  }
  return out
}

run(scenario)
