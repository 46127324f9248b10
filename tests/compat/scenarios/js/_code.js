'use strict'
// Helpers for the code-interpreter scenarios: executions as plain JSON with the same field
// names as the Python scenarios (scenarios/python/_code.py).

const RESULT_KEYS = ['text', 'html', 'markdown', 'svg', 'png', 'jpeg', 'pdf', 'latex', 'json', 'javascript', 'data']

function resultDict(result) {
  const out = {}
  for (const key of RESULT_KEYS) out[key] = result[key] === undefined ? null : result[key]
  out.is_main_result = result.isMainResult
  out.extra = result.extra || {}
  out.chart = result.chart === undefined ? null : result.chart
  out.chart_class = null // JS charts are plain objects
  return out
}

function errorDict(error) {
  if (!error) return null
  return { name: error.name, value: error.value, traceback: error.traceback }
}

function executionDict(execution) {
  return {
    text: execution.text === undefined ? null : execution.text,
    stdout: [...execution.logs.stdout],
    stderr: [...execution.logs.stderr],
    results: execution.results.map(resultDict),
    error: errorDict(execution.error),
    execution_count: execution.executionCount === undefined ? null : execution.executionCount,
  }
}

function contextDict(context) {
  return { id: context.id, language: context.language, cwd: context.cwd }
}

module.exports = { contextDict, errorDict, executionDict, resultDict }
