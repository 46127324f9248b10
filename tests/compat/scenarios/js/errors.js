'use strict'
// Error mapping: each failure must surface as the SDK's own error class and message.
// Argument: an API key the test has revoked.

const crypto = require('node:crypto')
const { CommandExitError, Sandbox } = require('e2b')
const { attempt, describeError, run } = require('./_common')

const MISSING_SANDBOX_ID = 'sandgatemissing00000'

// `Sandbox.create` that should fail; a sandbox created anyway is killed and reported.
async function createExpectingFailure(template, opts) {
  let sbx
  try {
    sbx = await Sandbox.create(template, opts)
  } catch (err) {
    return { ok: false, error: describeError(err) }
  }
  await Sandbox.kill(sbx.sandboxId, opts)
  return { ok: true, value: sbx.sandboxId }
}

async function scenario([revokedKey]) {
  const unknownKey = 'e2b_' + crypto.randomBytes(20).toString('hex')
  const out = { unknown_key: unknownKey }
  out.unknown_template = await createExpectingFailure(
    `sandgate-no-such-template-${crypto.randomBytes(4).toString('hex')}`,
    {},
  )
  out.bad_key_create = await createExpectingFailure('base', { apiKey: unknownKey })
  out.bad_key_list = await attempt(
    async () => (await Sandbox.list({ apiKey: unknownKey }).nextItems()).length,
  )
  out.revoked_key_create = await createExpectingFailure('base', { apiKey: revokedKey })
  out.kill_unknown = await attempt(() => Sandbox.kill(MISSING_SANDBOX_ID))
  out.connect_unknown = await attempt(
    async () => (await Sandbox.connect(MISSING_SANDBOX_ID)).sandboxId,
  )
  out.get_info_unknown = await attempt(
    async () => (await Sandbox.getInfo(MISSING_SANDBOX_ID)).sandboxId,
  )
  out.timeout_out_of_range = await createExpectingFailure('base', { timeoutMs: 1e9 * 1000 })

  const sbx = await Sandbox.create('base')
  try {
    try {
      await sbx.commands.run('echo out; echo oops >&2; exit 3')
      out.command_exit = { ok: true }
    } catch (err) {
      if (!(err instanceof CommandExitError)) throw err
      out.command_exit = { ok: false, error: describeError(err) }
    }
  } finally {
    await sbx.kill()
  }
  return out
}

run(scenario)
