'use strict'
// Helpers shared by the data_* scenarios (data plane, issue 3).

const { describeError } = require('./_common')

const POLL_INTERVAL_MS = 100

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

// Calls `check` until it returns something truthy or `timeoutS` passes; returns the last value
// (falsy on timeout). A thrown error counts as falsy.
async function poll(check, timeoutS = 10) {
  const deadline = performance.now() + timeoutS * 1000
  for (;;) {
    let value
    try {
      value = await check()
    } catch {
      value = null
    }
    if (value || performance.now() >= deadline) return value
    await sleep(POLL_INTERVAL_MS)
  }
}

// Like `attempt`, plus the elapsed time in seconds.
async function outcome(action) {
  const started = performance.now()
  try {
    const value = await action()
    return { ok: true, value, elapsed: (performance.now() - started) / 1000 }
  } catch (err) {
    return { ok: false, error: describeError(err), elapsed: (performance.now() - started) / 1000 }
  }
}

// Output callbacks that record each chunk with its arrival time (seconds since creation).
function recorder() {
  const started = performance.now()
  const chunks = []
  const rec = {
    chunks,
    onStdout: (data) => {
      chunks.push({ t: (performance.now() - started) / 1000, stream: 'stdout', data })
    },
    onStderr: (data) => {
      chunks.push({ t: (performance.now() - started) / 1000, stream: 'stderr', data })
    },
    stdout: () =>
      chunks
        .filter((c) => c.stream === 'stdout')
        .map((c) => c.data)
        .join(''),
  }
  return rec
}

module.exports = { outcome, poll, recorder, sleep }
