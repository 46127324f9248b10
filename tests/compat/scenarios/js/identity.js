'use strict'
// Workload identity (`iam`): a sandbox registers a token with `Secret.iamToken` and its
// `network.rules` put it in `Authorization` for the bound host through a `transform` callback
// (`iam.tokens.<name>`); `updateNetwork` may use the registered name only.
// Arguments: the bound host, the token's audience and two HTTPS URLs on the host that echo
// request headers (before and after the update).

const { Sandbox, Secret } = require('e2b')
const { attempt, run } = require('./_common')

async function scenario([host, audience, url, urlAfter]) {
  const out = {}
  const sandbox = await Sandbox.create('base', {
    iam: { tokens: { aws: Secret.iamToken({ audience, tokenType: 'JWT-SVID' }) } },
    network: {
      rules: {
        [host]: [
          { transform: ({ iam }) => ({ headers: { Authorization: `Bearer ${iam.tokens.aws}` } }) },
        ],
      },
    },
  })
  try {
    const result = await sandbox.commands.run(`curl -sS -D - ${url}`)
    out.request = { exit_code: result.exitCode, stdout: result.stdout }
    out.env = (await sandbox.commands.run('env')).stdout
    out.info_rules = ((await sandbox.getInfo()).network || {}).rules
    out.unregistered = await attempt(() =>
      sandbox.updateNetwork({
        rules: { [host]: [{ transform: ({ iam }) => ({ headers: { 'X-Id': iam.tokens.gcp } }) }] },
      }),
    )
    await sandbox.updateNetwork({
      rules: {
        [host]: [
          { transform: ({ iam }) => ({ headers: { Authorization: `Token ${iam.tokens.aws}` } }) },
        ],
      },
    })
    const after = await sandbox.commands.run(`curl -sS -D - ${urlAfter}`)
    out.after = { exit_code: after.exitCode, stdout: after.stdout }
  } finally {
    await attempt(() => sandbox.kill())
  }
  out.wrong_type = await attempt(() =>
    Sandbox.create('base', { iam: { tokens: { aws: { audience, tokenType: 'OIDC' } } } }),
  )
  return out
}

run(scenario)
