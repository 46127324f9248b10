'use strict'
// HTTPS hosts out of the box (issue 13): with only E2B_API_KEY, E2B_DOMAIN (with the server's
// port) and the local CA trusted through NODE_EXTRA_CA_CERTS, the SDK speaks E2B's own host
// scheme: the API at https://api.<domain>, envd at https://49983-<id>.<domain>, the code
// interpreter at https://49999-<id>.<domain>, a user's service at https://${getHost(port)}
// (with the traffic token), and signed downloadUrl()s.

const { Sandbox } = require('@e2b/code-interpreter')
const { attempt, commandResult, run } = require('./_common')
const { poll } = require('./_data')

const PORT = 8000

async function scenario() {
  const out = { no_urls_given: !process.env.E2B_API_URL && !process.env.E2B_SANDBOX_URL }
  const sbx = await Sandbox.create()
  try {
    out.envd_url = sbx.envdApiUrl
    out.command = commandResult(await sbx.commands.run('echo over-tls'))
    await sbx.files.write('/home/user/www/hello.txt', 'served over https')
    out.file = await sbx.files.read('/home/user/www/hello.txt')
    out.run_code = await attempt(async () => (await sbx.runCode('20 + 22')).text)
    await sbx.commands.run(`python3 -m http.server ${PORT}`, {
      background: true,
      cwd: '/home/user/www',
      timeoutMs: 0,
    })
    const host = sbx.getHost(PORT)
    out.host = host
    const token = sbx.trafficAccessToken || ''
    const served = await poll(async () => {
      const r = await fetch(`https://${host}/hello.txt`, {
        headers: { 'E2B-Traffic-Access-Token': token },
      })
      return r.status === 200 ? { status: r.status, body: await r.text() } : null
    }, 20)
    out.get_host = served || null
    out.get_host_without_token = (await fetch(`https://${host}/hello.txt`)).status
    const url = await sbx.downloadUrl('/home/user/www/hello.txt')
    out.download_url = url.split('?')[0]
    out.download = await (await fetch(url)).text()
  } finally {
    out.killed = await attempt(() => sbx.kill())
  }
  return out
}

run(scenario)
