'use strict'
// Files on the data plane (issue 3): read/write in every form, writeFiles, parents, overwrite,
// list with depth, exists, getInfo, makeDir, rename, remove, watchDir, gzip both ways,
// per-file metadata, and signed URLs used without SDK credentials (plain fetch).

const crypto = require('node:crypto')
const { Sandbox } = require('e2b')
const { attempt, describeError, iso, run } = require('./_common')
const { outcome, poll } = require('./_data')

const ROOT = '/home/user/dp'
const BINARY = Buffer.concat(Array.from({ length: 16 }, () => Buffer.from([...Array(256).keys()])))
const SEED = crypto.createHash('sha256').update('seed').digest()
const STREAM_BYTES = Buffer.concat(Array.from({ length: (3 * 1024 * 1024) / 32 }, () => SEED))
const WANTED_EVENTS = [
  'sub/new.txt create',
  'sub/new.txt write',
  'sub/new.txt chmod',
  'sub/new.txt rename',
  'sub/moved.txt create',
  'sub/moved.txt remove',
]

function info(entry) {
  return {
    name: entry.name,
    type: entry.type,
    path: entry.path,
    size: entry.size,
    mode: entry.mode,
    permissions: entry.permissions,
    owner: entry.owner,
    group: entry.group,
    modified_time: iso(entry.modifiedTime),
    symlink_target: entry.symlinkTarget === undefined ? null : entry.symlinkTarget,
    metadata: entry.metadata || {},
  }
}

function writeInfo(entry) {
  return { name: entry.name, path: entry.path, type: entry.type, metadata: entry.metadata || {} }
}

function streamOf(buffer, chunk = 256 * 1024) {
  let offset = 0
  return new ReadableStream({
    pull(controller) {
      if (offset >= buffer.length) {
        controller.close()
        return
      }
      controller.enqueue(new Uint8Array(buffer.subarray(offset, offset + chunk)))
      offset += chunk
    },
  })
}

const hex = (bytes) => Buffer.from(bytes).toString('hex')

async function scenario() {
  const out = {}
  const sbx = await Sandbox.create('base')
  const files = sbx.files
  try {
    // --- write and read in every form
    out.write_text = writeInfo(await files.write(`${ROOT}/a.txt`, 'héllo\n'))
    out.read_text = await files.read(`${ROOT}/a.txt`)
    out.read_bytes_of_text = hex(await files.read(`${ROOT}/a.txt`, { format: 'bytes' }))
    await files.write(`${ROOT}/bin.dat`, new Uint8Array(BINARY).buffer)
    out.binary_roundtrip = Buffer.from(
      await files.read(`${ROOT}/bin.dat`, { format: 'bytes' }),
    ).equals(BINARY)
    await files.write(`${ROOT}/stream.dat`, streamOf(STREAM_BYTES))
    const reader = await files.read(`${ROOT}/stream.dat`, { format: 'stream' })
    const chunks = []
    for await (const chunk of reader) chunks.push(Buffer.from(chunk))
    out.stream_chunks = chunks.length
    out.stream_roundtrip = Buffer.concat(chunks).equals(STREAM_BYTES)
    out.write_files = (
      await files.write([
        { path: `${ROOT}/many/one.txt`, data: '1' },
        { path: `${ROOT}/many/two.bin`, data: new Uint8Array([0, 2]).buffer },
        { path: `${ROOT}/many/deep/three.txt`, data: '3' },
      ])
    ).map(writeInfo)
    out.write_files_read = [
      await files.read(`${ROOT}/many/one.txt`),
      hex(await files.read(`${ROOT}/many/two.bin`, { format: 'bytes' })),
      await files.read(`${ROOT}/many/deep/three.txt`),
    ]
    out.parents = writeInfo(await files.write(`${ROOT}/p/q/r/s.txt`, 'deep'))
    out.parents_read = await files.read(`${ROOT}/p/q/r/s.txt`)
    await files.write(`${ROOT}/a.txt`, 'second')
    out.overwrite_read = await files.read(`${ROOT}/a.txt`)
    out.read_missing = await attempt(() => files.read(`${ROOT}/missing.txt`))
    out.read_dir = await attempt(() => files.read(ROOT))

    // --- list with depth: exact lexical pre-order, root excluded
    for (const path of ['tree/a/b/c.txt', 'tree/a/x.txt', 'tree/z.txt']) {
      await files.write(`${ROOT}/${path}`, path)
    }
    out.list = {}
    for (const depth of [1, 2, 3]) {
      out.list[String(depth)] = (await files.list(`${ROOT}/tree`, { depth })).map((e) => e.path)
    }
    out.list_missing = await attempt(() => files.list(`${ROOT}/nope`))

    // --- exists, getInfo (file, directory, symlink)
    out.exists = [await files.exists(`${ROOT}/a.txt`), await files.exists(`${ROOT}/missing.txt`)]
    await sbx.commands.run(
      `chmod 640 ${ROOT}/a.txt && touch -d '2001-02-03 04:05:06 UTC' ${ROOT}/a.txt` +
        ` && ln -s ${ROOT}/a.txt ${ROOT}/link && ln -s ${ROOT}/tree ${ROOT}/dirlink`,
    )
    out.info_file = info(await files.getInfo(`${ROOT}/a.txt`))
    out.info_dir = info(await files.getInfo(`${ROOT}/tree`))
    out.info_link = info(await files.getInfo(`${ROOT}/link`))
    out.info_dirlink = info(await files.getInfo(`${ROOT}/dirlink`))
    out.info_root_file = info(await files.getInfo('/etc/hostname'))
    out.info_missing = await attempt(() => files.getInfo(`${ROOT}/missing.txt`))

    // --- makeDir, rename, remove
    out.make_dir = [
      await files.makeDir(`${ROOT}/made/x/y`),
      await files.makeDir(`${ROOT}/made/x/y`),
      await files.makeDir(`${ROOT}/made`),
    ]
    await files.write(`${ROOT}/ren-src.txt`, 'moving')
    out.rename = info(await files.rename(`${ROOT}/ren-src.txt`, `${ROOT}/ren/dst.txt`))
    out.rename_after = [
      await files.exists(`${ROOT}/ren-src.txt`),
      await files.read(`${ROOT}/ren/dst.txt`),
    ]
    out.rename_missing = await attempt(() => files.rename(`${ROOT}/nope`, `${ROOT}/nope2`))
    await files.remove(`${ROOT}/tree`)
    await files.remove(`${ROOT}/a.txt`)
    out.remove_after = [await files.exists(`${ROOT}/tree`), await files.exists(`${ROOT}/a.txt`)]
    out.remove_missing = await attempt(() => files.remove(`${ROOT}/never-existed`))

    // --- watchDir (recursive): create, write, chmod, rename, remove in a subdirectory
    await files.makeDir(`${ROOT}/watched/sub`)
    const seen = []
    const watcher = await files.watchDir(
      `${ROOT}/watched`,
      (event) => {
        seen.push([event.name, String(event.type)])
      },
      { recursive: true },
    )
    await files.write(`${ROOT}/watched/sub/new.txt`, 'v1')
    await sbx.commands.run(`echo more >> ${ROOT}/watched/sub/new.txt`)
    await sbx.commands.run(`chmod 600 ${ROOT}/watched/sub/new.txt`)
    await files.rename(`${ROOT}/watched/sub/new.txt`, `${ROOT}/watched/sub/moved.txt`)
    await files.remove(`${ROOT}/watched/sub/moved.txt`)
    const complete = () => {
      const got = new Set(seen.map(([n, t]) => `${n} ${t.toLowerCase()}`))
      return WANTED_EVENTS.every((w) => got.has(w))
    }
    out.watch_complete = Boolean(await poll(complete, 10))
    out.watch_events = seen
    await watcher.stop()
    out.watch_missing = await attempt(() => files.watchDir(`${ROOT}/no-such-dir`, () => {}))

    // --- gzip both ways
    const gzData = Buffer.from('gzip me '.repeat(10000))
    out.gzip_write = await outcome(async () =>
      writeInfo(await files.write(`${ROOT}/gz.bin`, new Uint8Array(gzData).buffer, { gzip: true })),
    )
    out.gzip_read = await outcome(async () =>
      Buffer.from(await files.read(`${ROOT}/gz.bin`, { format: 'bytes', gzip: true })).equals(
        gzData,
      ),
    )

    // --- per-file metadata (keys lowercased; each upload replaces the set)
    out.metadata_write = await outcome(async () =>
      writeInfo(
        await files.write(`${ROOT}/meta.txt`, 'm', { metadata: { 'Owner-Team': 'blue', x: '1' } }),
      ),
    )
    out.metadata_info = info(await files.getInfo(`${ROOT}/meta.txt`)).metadata
    await files.write(`${ROOT}/meta.txt`, 'm2')
    out.metadata_replaced = info(await files.getInfo(`${ROOT}/meta.txt`)).metadata

    // --- signed URLs used with no SDK credentials at all
    const uploadUrl = await sbx.uploadUrl(`${ROOT}/signed.txt`)
    const downloadUrl = await sbx.downloadUrl(`${ROOT}/signed.txt`)
    const form = new FormData()
    form.append('file', new Blob([Buffer.from('via signed url')]), 'signed.txt')
    const up = await fetch(uploadUrl, { method: 'POST', body: form })
    out.signed_upload = { status: up.status, body: await up.text() }
    const down = await fetch(downloadUrl)
    out.signed_download = { status: down.status, body: await down.text() }
    const bad = await fetch(downloadUrl.replace('signed.txt', 'other.txt'))
    out.signed_tampered = { status: bad.status, body: await bad.text() }
    const expiring = await sbx.downloadUrl(`${ROOT}/signed.txt`, { useSignatureExpiration: 1 })
    out.expiring_first = (await fetch(expiring)).status
    const expired = await poll(async () => {
      const r = await fetch(expiring)
      return r.status === 401 ? { status: r.status, body: await r.json() } : null
    }, 10)
    out.expired = expired || null
  } catch (err) {
    out.scenario_error = { ...describeError(err), cause: String(err && err.cause), stack: String(err && err.stack) }
  } finally {
    out.cleanup = await attempt(() => sbx.kill())
  }
  return out
}

run(scenario)
