'use strict'
// Ports and sandbox death (issue 3): a server inside the sandbox is reachable through Sandgate by
// `Host: <port>-<id>.<domain>` and by the routing headers, with the sandbox's trafficAccessToken
// (ports are private by default; without it: 401); a sandbox created with allowPublicTraffic
// serves without one; a closed port answers E2B's 502 JSON;
// the sandbox has no network interface but `lo`. Then the sandbox is killed while a command
// runs: the stream drops, isRunning() is false, the SDK raises its timeout error, and a
// neighbour sandbox keeps working.

const http = require('node:http')
const { Sandbox } = require('e2b')
const { attempt, commandResult, describeError, run } = require('./_common')
const { outcome, poll } = require('./_data')

const PORT = 8000
const CLOSED_PORT = 8001

// A GET through node:http, which sends the Host header exactly as given.
function get(base, path, headers) {
  const url = new URL(path, base)
  return new Promise((resolve, reject) => {
    const req = http.request(url, { method: 'GET', headers }, (res) => {
      const parts = []
      res.on('data', (c) => parts.push(c))
      res.on('end', () => {
        const text = Buffer.concat(parts).toString()
        let body = text
        try {
          body = JSON.parse(text)
        } catch {}
        resolve({ status: res.statusCode, body })
      })
    })
    req.on('error', reject)
    req.end()
  })
}

async function scenario() {
  const out = {}
  const base = process.env.E2B_SANDBOX_URL
  const sbx = await Sandbox.create('base')
  const neighbour = await Sandbox.create('base', { network: { allowPublicTraffic: true } })
  try {
    await sbx.files.write('/home/user/www/hello.txt', 'served from inside')
    const server = await sbx.commands.run(`python3 -m http.server ${PORT}`, {
      background: true,
      cwd: '/home/user/www',
      timeoutMs: 0,
    })
    const host = sbx.getHost(PORT)
    out.host = host
    out.sandbox_id = sbx.sandboxId
    const token = sbx.trafficAccessToken || ''
    out.traffic_token_set = Boolean(token)
    out.public_traffic_token = neighbour.trafficAccessToken ?? null
    const auth = { 'E2B-Traffic-Access-Token': token }
    out.by_host =
      (await poll(async () => {
        const r = await get(base, '/hello.txt', { Host: host, ...auth })
        return r.status === 200 ? r : null
      }, 20)) || null
    out.by_headers = await get(base, '/hello.txt', {
      'E2b-Sandbox-Id': sbx.sandboxId,
      'E2b-Sandbox-Port': String(PORT),
      ...auth,
    })
    out.without_token = await get(base, '/hello.txt', { Host: host })
    out.closed_port = await get(base, '/', { Host: sbx.getHost(CLOSED_PORT), ...auth })
    await neighbour.files.write('/home/user/www/hello.txt', 'public')
    const publicServer = await neighbour.commands.run(`python3 -m http.server ${PORT}`, {
      background: true,
      cwd: '/home/user/www',
      timeoutMs: 0,
    })
    out.public_port =
      (await poll(async () => {
        const r = await get(base, '/hello.txt', { Host: neighbour.getHost(PORT) })
        return r.status === 200 ? r : null
      }, 20)) || null
    await publicServer.kill()
    await server.disconnect()
    out.interfaces = commandResult(await sbx.commands.run("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"))

    // --- the sandbox is killed while a command runs
    const running = await sbx.commands.run('sleep 120', { background: true, timeoutMs: 0 })
    const waiting = outcome(() => running.wait())
    out.killed = await Sandbox.kill(sbx.sandboxId)
    out.stream_after_kill = await waiting
    out.is_running_after_kill = await sbx.isRunning()
    out.run_after_kill = await attempt(() => sbx.commands.run('echo late'))
    out.neighbour = commandResult(await neighbour.commands.run('echo ok'))
    out.neighbour_running = await neighbour.isRunning()
  } catch (err) {
    out.scenario_error = { ...describeError(err), cause: String(err && err.cause), stack: String(err && err.stack) }
  } finally {
    await attempt(() => sbx.kill())
    out.cleanup = await attempt(() => neighbour.kill())
  }
  return out
}

run(scenario)
