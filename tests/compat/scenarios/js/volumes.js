'use strict'
// A team volume end to end: the volume file API, a sandbox that mounts it, refusal to delete it
// while mounted, reading back what the sandbox wrote, and destroy.
// Argument: the volume's name.

const { Sandbox, Volume } = require('e2b')
const { attempt, run } = require('./_common')

const entry = (e) => ({
  name: e.name,
  type: e.type,
  path: e.path,
  size: e.size,
  mode: e.mode,
  uid: e.uid,
  gid: e.gid,
})

async function scenario([name]) {
  const out = {}
  const volume = await Volume.create(name)
  out.created = { name: volume.name, has_token: Boolean(volume.token) }
  out.write = entry(await volume.writeFile('/docs/hello.txt', 'hello', { force: true }))
  out.write_no_parent = await attempt(() => volume.writeFile('/missing/x.txt', 'x'))
  out.make_dir = entry(await volume.makeDir('/docs/sub'))
  out.list = (await volume.list('/docs')).map((e) => e.name).sort()
  out.stat = entry(await volume.getInfo('/docs/hello.txt'))
  out.exists = [await volume.exists('/docs/hello.txt'), await volume.exists('/nope')]
  out.chmod = entry(await volume.updateMetadata('/docs/hello.txt', { mode: 0o640 }))
  out.read = await volume.readFile('/docs/hello.txt')
  out.read_missing = await attempt(() => volume.readFile('/nope'))
  const sandbox = await Sandbox.create('base', { volumeMounts: { '/mnt/vol': volume } })
  try {
    const inside = await sandbox.commands.run(
      "cat /mnt/vol/docs/hello.txt && echo && echo inside > /mnt/vol/from-sandbox.txt " +
        "&& stat -c '%U %a' /mnt/vol/from-sandbox.txt",
    )
    out.inside = inside.stdout
    out.info_mounts = (await sandbox.getInfo()).volumeMounts || []
    out.destroy_mounted = await attempt(() => Volume.destroy(volume.volumeId))
  } finally {
    await attempt(() => sandbox.kill())
  }
  out.read_back = await volume.readFile('/from-sandbox.txt')
  out.listed = (await Volume.list()).some((v) => v.name === name)
  out.info_by_id = (await Volume.getInfo(volume.volumeId)).name
  out.connect = await (await Volume.connect(volume.volumeId)).readFile('/docs/hello.txt')
  await volume.remove('/docs')
  out.removed = await volume.exists('/docs')
  out.destroyed = await Volume.destroy(volume.volumeId)
  out.destroyed_again = await Volume.destroy(volume.volumeId)
  out.info_after = await attempt(() => Volume.getInfo(volume.volumeId))
  return out
}

run(scenario)
