'use strict'
// WebSockets to a sandbox service (issue 13), the SDK's part: upload a WebSocket echo service
// (the `websockets` tarball and script the test hands over, as paths), start it in the
// background, and report getHost(port) and the traffic token a client needs. The sandbox is
// left running: the test connects to wss://<host> with its own WebSocket client, then kills it.

const fs = require('node:fs')
const { Sandbox } = require('e2b')
const { commandResult, run } = require('./_common')
const { poll } = require('./_data')

const PORT = 9100
const PROBE = `python3 -c 'import socket; socket.create_connection(("127.0.0.1", ${PORT}))'`

async function scenario(args) {
  const [tarball, script] = args
  const sbx = await Sandbox.create('base', { timeoutMs: 600_000 })
  const bytes = fs.readFileSync(tarball)
  await sbx.files.write(
    '/home/user/wslib.tgz',
    bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength),
  )
  await sbx.files.write('/home/user/ws_server.py', fs.readFileSync(script, 'utf8'))
  const out = {
    unpack: commandResult(
      await sbx.commands.run('mkdir -p /home/user/wslib && tar xzf wslib.tgz -C wslib', {
        cwd: '/home/user',
      }),
    ),
  }
  await sbx.commands.run('python3 /home/user/ws_server.py', { background: true, timeoutMs: 0 })
  out.listening = Boolean(
    await poll(async () => {
      try {
        return (await sbx.commands.run(PROBE)).exitCode === 0
      } catch {
        return false
      }
    }, 30),
  )
  out.sandbox_id = sbx.sandboxId
  out.host = sbx.getHost(PORT)
  out.token = sbx.trafficAccessToken
  return out
}

run(scenario)
