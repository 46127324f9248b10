'use strict'
// Metrics and logs (issue 13): getMetrics as instance and static method (with a start/end
// window), GET /sandboxes/metrics and both logs endpoints through the SDK's own ApiClient
// (the logs have no SDK method; the CLI reads v1).
// Argument: a marker the scenario prints inside the sandbox.

const { ApiClient, ConnectionConfig, Sandbox } = require('e2b')
const { attempt, run } = require('./_common')

const POLL_MS = 30_000

function metricDict(metric) {
  return {
    timestamp: metric.timestamp.getTime() / 1000,
    cpu_count: metric.cpuCount,
    cpu_used_pct: metric.cpuUsedPct,
    mem_used: metric.memUsed,
    mem_total: metric.memTotal,
    mem_cache: metric.memCache,
    disk_used: metric.diskUsed,
    disk_total: metric.diskTotal,
  }
}

function entryDict(entry) {
  return {
    timestamp: new Date(entry.timestamp).getTime() / 1000,
    level: entry.level,
    message: entry.message,
    fields: entry.fields,
  }
}

async function logsV1(api, sandboxId) {
  const res = await api.api.GET('/sandboxes/{sandboxID}/logs', {
    params: { path: { sandboxID: sandboxId } },
  })
  return {
    status: res.response.status,
    lines: res.data.logs.map((log) => ({
      timestamp: new Date(log.timestamp).getTime() / 1000,
      line: log.line,
    })),
    entries: res.data.logEntries.map(entryDict),
  }
}

async function scenario([marker]) {
  const out = {}
  const api = new ApiClient(new ConnectionConfig())
  const sbx = await Sandbox.create('base')
  const sandboxId = sbx.sandboxId
  out.sandbox_id = sandboxId
  try {
    out.echo = (await sbx.commands.run(`echo ${marker}-out; echo ${marker}-err >&2`)).stdout
    out.metrics = (await sbx.getMetrics()).map(metricDict)
    const start = new Date(Date.now() - 60_000)
    const end = new Date(Date.now() + 60_000)
    out.window = [start.getTime() / 1000, end.getTime() / 1000]
    out.metrics_window = (await Sandbox.getMetrics(sandboxId, { start, end })).map(metricDict)
    const past = await Sandbox.getMetrics(sandboxId, {
      start: new Date(start.getTime() - 7_200_000),
      end: new Date(start.getTime() - 3_600_000),
    })
    out.metrics_past = past.map(metricDict)
    const many = await api.api.GET('/sandboxes/metrics', {
      params: { query: { sandbox_ids: [sandboxId] } },
    })
    out.metrics_many_status = many.response.status
    out.metrics_many_ids = Object.keys(many.data.sandboxes).sort()

    const handle = await sbx.commands.run(`sleep 0.5; echo ${marker}-bg`, { background: true })
    await handle.disconnect() // nobody streams it any more; its output still reaches the log
    const deadline = Date.now() + POLL_MS
    let v1 = await logsV1(api, sandboxId)
    while (!v1.entries.some((e) => e.message === `${marker}-bg`) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      v1 = await logsV1(api, sandboxId)
    }
    out.logs_v1 = v1
    const v2 = await api.api.GET('/v2/sandboxes/{sandboxID}/logs', {
      params: {
        path: { sandboxID: sandboxId },
        query: { search: marker, direction: 'backward', limit: 2 },
      },
    })
    out.logs_v2_status = v2.response.status
    out.logs_v2 = v2.data.logs.map(entryDict)

    out.kill = await sbx.kill()
    const after = await logsV1(api, sandboxId)
    out.logs_after_kill = after.entries[after.entries.length - 1]
    out.metrics_after_kill = await attempt(async () => (await Sandbox.getMetrics(sandboxId)).length)
    out.metrics_unknown = await attempt(() => Sandbox.getMetrics('a'.repeat(25)))
  } finally {
    out.cleanup = await attempt(() => Sandbox.kill(sandboxId))
  }
  return out
}

run(scenario)
