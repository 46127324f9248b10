'use strict'
// Snapshots and forks (issue 18): createSnapshot (unnamed and named), listSnapshots,
// Sandbox.create(snapshotId), fork({count: 2}) (the SDK's where it has one, else the raw
// POST /sandboxes/{id}/fork it would send, then connect), deleteSnapshot.
// A save holds the files (new, changed and deleted ones) and the creating call's envs; the
// source's processes are not in it. Argument: a random tag, used as the snapshot's name.

const { Sandbox } = require('e2b')
const { attempt, commandResult, describeError, run } = require('./_common')

// Runs inside the sandbox, in its own pid namespace: pgrep sees the sandbox's processes only.
const PROBE =
  'cat /home/user/note.txt; echo; test -e /etc/issue && echo issue || echo no-issue; ' +
  'echo $FOO; pgrep -x sleep >/dev/null && echo sleeping || echo no-sleep'

async function probe(sbx) {
  return commandResult(await sbx.commands.run(PROBE))
}

async function fork(sbx, count) {
  if (typeof sbx.fork === 'function') {
    return { via: 'sdk', forks: await sbx.fork({ count, timeoutMs: 120_000 }) }
  }
  const response = await fetch(`${process.env.E2B_API_URL}/sandboxes/${sbx.sandboxId}/fork`, {
    method: 'POST',
    headers: { 'X-API-KEY': process.env.E2B_API_KEY, 'content-type': 'application/json' },
    body: JSON.stringify({ count, timeout: 120 }),
  })
  const body = await response.json()
  const forks = []
  for (const entry of body) {
    forks.push(entry.sandbox ? await Sandbox.connect(entry.sandbox.sandboxID) : entry)
  }
  return { via: 'http', status: response.status, forks }
}

async function listIds(sandboxId) {
  const paginator = Sandbox.listSnapshots({ sandboxId })
  const ids = []
  while (paginator.hasNext) {
    for (const item of await paginator.nextItems()) ids.push(item.snapshotId)
  }
  return ids
}

async function scenario([tag]) {
  const out = {}
  const made = []
  const source = await Sandbox.create('base', { envs: { FOO: 'bar' }, timeoutMs: 300_000 })
  made.push(source.sandboxId)
  try {
    await source.files.write('/home/user/note.txt', 'before the snapshot')
    await source.commands.run('sudo rm -f /etc/issue')
    await source.commands.run('sleep 1000', { background: true, timeoutMs: 0 })

    const unnamed = await source.createSnapshot()
    const named = await source.createSnapshot({ name: tag })
    out.unnamed = { snapshot_id: unnamed.snapshotId, names: unnamed.names }
    out.named = { snapshot_id: named.snapshotId, names: named.names }
    out.source_after = await probe(source)
    await source.files.write('/home/user/note.txt', 'after the snapshot')

    out.listed = await listIds(source.sandboxId)

    const restored = await Sandbox.create(unnamed.snapshotId, { timeoutMs: 120_000 })
    made.push(restored.sandboxId)
    out.restored_id = restored.sandboxId
    out.restored = await probe(restored)
    const byName = await Sandbox.create(named.snapshotId, { timeoutMs: 120_000 })
    made.push(byName.sandboxId)
    out.by_name = await probe(byName)

    const forked = await fork(source, 2)
    out.fork_via = forked.via
    out.fork_status = forked.status ?? null
    out.forks = []
    for (const item of forked.forks) {
      if (item instanceof Sandbox) {
        made.push(item.sandboxId)
        out.forks.push({ id: item.sandboxId, probe: await probe(item) })
      } else if (item instanceof Error) {
        out.forks.push({ error: describeError(item) })
      } else {
        out.forks.push({ error: item })
      }
    }

    out.delete = await attempt(() => Sandbox.deleteSnapshot(unnamed.snapshotId))
    out.delete_again = await attempt(() => Sandbox.deleteSnapshot(unnamed.snapshotId))
    out.create_deleted = await attempt(
      async () => (await Sandbox.create(unnamed.snapshotId)).sandboxId,
    )
    if (out.create_deleted.ok) made.push(out.create_deleted.value)
    out.delete_named = await attempt(() => Sandbox.deleteSnapshot(named.snapshotId))
    out.listed_after = await listIds(source.sandboxId)
    out.restored_after_delete = await probe(restored)
  } finally {
    out.cleanup = []
    for (const id of made) out.cleanup.push(await attempt(() => Sandbox.kill(id)))
  }
  return out
}

run(scenario)
