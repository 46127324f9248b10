'use strict'
// Team secrets: create, read back (never the value), update, list, check and destroy, and a
// sandbox whose `network.rules` put one in a header for the bound host only.
// SDKs before 2.46 have no `Secret`: the same calls go over raw HTTP to the routes the newest
// SDK uses (`E2B_API_URL` and `E2B_API_KEY`, as the SDK would send them).
// Arguments: the secret's name, its value, its next value, the bound host and an HTTPS URL on
// it that echoes request headers.

const e2b = require('e2b')
const { Sandbox } = e2b
const { attempt, run } = require('./_common')

async function raw(method, path, body) {
  const response = await fetch(process.env.E2B_API_URL + path, {
    method,
    headers: { 'X-API-KEY': process.env.E2B_API_KEY, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await response.text()
  return { status: response.status, body: text ? JSON.parse(text) : null }
}

const info = (i) => ({
  id: i.secretId,
  name: i.name,
  version: i.version,
  metadata: i.metadata,
  fields: Object.keys(i).sort(),
})
const rawInfo = (b) => ({
  id: b.secretID,
  name: b.name,
  version: b.currentVersion,
  metadata: b.metadata,
  fields: Object.keys(b).sort(),
})

async function scenario([name, value, nextValue, host, url]) {
  const Secret = e2b.Secret
  const out = { sdk_secret: Secret !== undefined }
  let placeholder
  if (Secret !== undefined) {
    const created = await Secret.create(name, value, { metadata: { team: 'compat' } })
    out.created = info(created)
    out.by_name = info(await Secret.getInfo(name))
    out.updated = info(await Secret.update(created.secretId, nextValue))
    out.listed = (await Secret.list().nextItems()).map((s) => s.name)
    out.exists = await Secret.exists(name)
    placeholder = Secret.fill(name)
  } else {
    const made = await raw('POST', '/secrets', { name, value, metadata: { team: 'compat' } })
    out.created = rawInfo(made.body)
    out.by_name = rawInfo((await raw('GET', `/secrets/${name}`)).body)
    out.updated = rawInfo((await raw('POST', `/secrets/${made.body.secretID}`, { value: nextValue })).body)
    out.listed = (await raw('GET', '/secrets')).body.map((s) => s.name)
    out.exists = (await raw('GET', `/secrets/${name}`)).status === 200
    placeholder = '${e2b.secrets.' + name + '}'
  }
  const rules = { [host]: [{ transform: { headers: { Authorization: `Bearer ${placeholder}` } } }] }
  const sandbox = await Sandbox.create('base', { network: { rules } })
  try {
    const result = await sandbox.commands.run(`curl -sS -D - ${url}`)
    out.request = { exit_code: result.exitCode, stdout: result.stdout }
    out.env_has_value = (await sandbox.commands.run('env')).stdout.includes(value)
  } finally {
    await attempt(() => sandbox.kill())
  }
  const id = out.created.id
  if (Secret !== undefined) {
    out.destroyed = await Secret.destroy(id)
    out.destroyed_again = await Secret.destroy(id)
    out.exists_after = await Secret.exists(name)
    out.get_after = await attempt(() => Secret.getInfo(name))
  } else {
    out.destroyed = (await raw('DELETE', `/secrets/${id}`)).status === 204
    out.destroyed_again = (await raw('DELETE', `/secrets/${id}`)).status === 204
    out.exists_after = (await raw('GET', `/secrets/${name}`)).status === 200
    out.get_after = { ok: false, status: (await raw('GET', `/secrets/${name}`)).status }
  }
  return out
}

run(scenario)
