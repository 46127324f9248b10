'use strict'
// The last of E2B's surface (issue 13) through the SDK's own typed clients (the SDK has no
// methods for these; the CLI calls /teams): the control plane's ApiClient for /teams, team
// metrics and refreshes, the sandbox's envd client (`envdApi`) for /files/compose and
// /metrics.

const { ApiClient, ConnectionConfig, Sandbox } = require('e2b')
const { attempt, run } = require('./_common')

async function scenario() {
  const out = {}
  const api = new ApiClient(new ConnectionConfig())
  const teams = await api.api.GET('/teams')
  out.teams_status = teams.response.status
  out.teams = teams.data
  const teamID = teams.data[0].teamID
  const start = Math.floor(Date.now() / 1000) - 2
  const sbx = await Sandbox.create('base', { timeoutMs: 60_000 })
  try {
    out.end_before = (await sbx.getInfo()).endAt.getTime() / 1000
    const refreshed = await api.api.POST('/sandboxes/{sandboxID}/refreshes', {
      params: { path: { sandboxID: sbx.sandboxId } },
      body: { duration: 600 },
    })
    out.refresh_status = refreshed.response.status
    out.end_after = (await sbx.getInfo()).endAt.getTime() / 1000

    const end = Math.floor(Date.now() / 1000) + 1
    const metrics = await api.api.GET('/teams/{teamID}/metrics', {
      params: { path: { teamID }, query: { start, end } },
    })
    out.team_metrics_status = metrics.response.status
    out.team_metrics = metrics.data
    const most = await api.api.GET('/teams/{teamID}/metrics/max', {
      params: { path: { teamID }, query: { start, end, metric: 'concurrent_sandboxes' } },
    })
    out.team_max_status = most.response.status
    out.team_max = most.data
    const foreign = await api.api.GET('/teams/{teamID}/metrics', {
      params: { path: { teamID: 'someone-else' } },
    })
    out.foreign_status = foreign.response.status

    await sbx.files.write('/home/user/part1', 'hello ')
    await sbx.files.write('/home/user/part2', 'world')
    const composed = await sbx.envdApi.api.POST('/files/compose', {
      body: { source_paths: ['/home/user/part1', '/home/user/part2'], destination: 'hw.txt' },
    })
    out.compose_status = composed.response.status
    out.compose = composed.data
    out.composed = await sbx.files.read('/home/user/hw.txt')
    out.part1_exists = await sbx.files.exists('/home/user/part1')
    const missing = await sbx.envdApi.api.POST('/files/compose', {
      body: { source_paths: ['/home/user/nope'], destination: 'x' },
    })
    out.compose_missing_status = missing.response.status

    const envdMetrics = await sbx.envdApi.api.GET('/metrics')
    out.envd_metrics_status = envdMetrics.response.status
    out.envd_metrics = envdMetrics.data
  } finally {
    out.kill = await attempt(() => sbx.kill())
  }
  return out
}

run(scenario)
