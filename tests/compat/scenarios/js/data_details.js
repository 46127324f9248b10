'use strict'
// Data-plane details E2B's own clients rely on (issue 18), each as E2B's envd behaves: a signed
// upload URL takes a multipart form whose `file` part is a plain field (no filename), as JS
// users send it with FormData; files under /proc and /sys read through the files API exactly as
// `cat` reads them as the same user inside the sandbox; a write through the files API gives
// envd's watch events, counted on the stream; a command whose sandbox is killed ends with the
// SDK's "sandbox was killed" error.

const { Sandbox } = require('e2b')
const { attempt, describeError, run } = require('./_common')
const { outcome, poll } = require('./_data')

const ROOT = '/home/user/details'
// Files the kernel generates, read both ways (/sys/class/net/lo is absent where the runtime
// mounts no sysfs: then both ways must say so).
const KERNEL_FILES = [
  '/proc/sys/kernel/random/boot_id',
  '/proc/sys/kernel/hostname',
  '/proc/self/uid_map',
  '/sys/class/net/lo/mtu',
]
const STREAM_WAIT_S = 20

async function readBothWays(sbx, path) {
  const shown = await sbx.commands.run(`cat ${path} 2>/dev/null || echo MISSING`, { user: 'user' })
  const read = await attempt(() => sbx.files.read(path, { user: 'user' }))
  return { cat: shown.stdout, read }
}

async function scenario() {
  const out = {}
  const sbx = await Sandbox.create('base')
  const files = sbx.files
  try {
    // --- a signed upload URL and a form whose 'file' part is a plain field
    await files.makeDir(ROOT)
    const form = new FormData()
    form.append('file', 'a plain field')
    const up = await fetch(await sbx.uploadUrl(`${ROOT}/plain.txt`), { method: 'POST', body: form })
    out.plain_field = { status: up.status, body: await up.text() }
    out.plain_field_read = await attempt(() => files.read(`${ROOT}/plain.txt`))
    const nowhere = new FormData()
    nowhere.append('file', 'no path at all')
    const none = await fetch(await sbx.uploadUrl(), { method: 'POST', body: nowhere })
    out.plain_field_no_path = { status: none.status, body: await none.text() }

    // --- files the kernel generates, as the sandbox's user sees them
    out.kernel_files = {}
    for (const path of KERNEL_FILES) out.kernel_files[path] = await readBothWays(sbx, path)
    out.id = (await sbx.commands.run('id -u')).stdout.trim()
    out.status = await attempt(() => files.read('/proc/self/status', { user: 'user' }))
    out.pagemap = await attempt(() => files.read('/proc/self/pagemap', { user: 'root' }))
    out.mem = await attempt(() => files.read('/proc/self/mem', { user: 'root' }))
    await sbx.commands.run(`mkfifo ${ROOT}/fifo`)
    out.fifo = await attempt(() => files.read(`${ROOT}/fifo`))

    // --- a write's watch events on the stream: a new file, the same file overwritten, an
    // empty file, a file with metadata, then a sentinel whose write marks the end
    await files.makeDir(`${ROOT}/streamed`)
    const seen = []
    const handle = await files.watchDir(`${ROOT}/streamed`, (event) => {
      seen.push([event.name, String(event.type).toLowerCase()])
    })
    await files.write(`${ROOT}/streamed/a.txt`, 'first')
    await files.write(`${ROOT}/streamed/a.txt`, 'second')
    await files.write(`${ROOT}/streamed/empty.txt`, '')
    await files.write(`${ROOT}/streamed/meta.txt`, 'm', { metadata: { k: 'v' } })
    await files.write(`${ROOT}/streamed/sentinel.txt`, 'end')
    const complete = () => seen.some(([n, t]) => n === 'sentinel.txt' && t === 'write')
    out.streamed = { complete: Boolean(await poll(complete, STREAM_WAIT_S)), events: seen }
    await handle.stop()

    // --- the sandbox is killed while a command runs
    const running = await sbx.commands.run('sleep 120', { background: true, timeoutMs: 0 })
    const waiting = outcome(() => running.wait())
    out.killed = await sbx.kill()
    out.killed_wait = await waiting
  } catch (err) {
    out.scenario_error = { ...describeError(err), cause: String(err && err.cause), stack: String(err && err.stack) }
  } finally {
    out.cleanup = await attempt(() => sbx.kill())
  }
  return out
}

run(scenario)
