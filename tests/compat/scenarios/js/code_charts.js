'use strict'
// Result.data for pandas DataFrames and Result.chart for matplotlib figures.

const { Sandbox } = require('@e2b/code-interpreter')
const { attempt, describeError, run } = require('./_common')
const { executionDict } = require('./_code')

const FRAME = `
import pandas as pd
pd.DataFrame({
    "city": ["Oslo", "Rome"],
    "temp": [3.5, float("nan")],
    "when": pd.to_datetime(["2024-01-01", "2024-01-02"]),
})
`

// Same cells as scenarios/python/code_charts.py.
const CHARTS = {
  line: `
import datetime
import matplotlib.pyplot as plt
days = [datetime.date(2024, 1, 1) + datetime.timedelta(days=i) for i in range(3)]
plt.figure()
plt.plot(days, [1.5, 2.5, 2.0], label="temp")
plt.plot(days, [0.5, 1.0, 1.5], label="rain")
plt.title("Weather")
plt.xlabel("Day")
plt.ylabel("Temperature (C)")
plt.show()
`,
  scatter: `
import matplotlib.pyplot as plt
plt.figure()
plt.scatter([1, 2, 3], [4, 5, 6], label="first")
plt.scatter([7, 8], [9, 10], label="second")
plt.yscale("log")
plt.show()
`,
  bar: `
import matplotlib.pyplot as plt
plt.figure()
plt.bar(["Author A", "Author B", "Author C"], [100, 200, 300], label="Books Sold")
plt.xlabel("Authors")
plt.ylabel("Number of Books Sold [units]")
plt.title("Book Sales")
plt.show()
`,
  pie: `
import matplotlib.pyplot as plt
plt.figure()
plt.pie([90, 10], labels=["No", "Yes"])
plt.title("Early tomorrow?")
plt.show()
`,
  box: `
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.boxplot([[1, 2, 3, 4, 5, 40], [2, 3, 4]], labels=["A", "B"])
ax.set_title("Scores")
ax.set_xlabel("Class")
ax.set_ylabel("Score")
plt.show()
`,
  super: `
import matplotlib.pyplot as plt
fig, axs = plt.subplots(1, 2)
fig.suptitle("Two charts")
axs[0].plot([1, 2, 3], [1, 4, 9])
axs[0].set_title("Squares")
axs[1].bar(["x", "y"], [3, 4])
plt.show()
`,
  blank: `
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
plt.show()
`,
}

async function scenario() {
  const out = {}
  const sbx = await Sandbox.create()
  try {
    const runCode = async (code, opts) => executionDict(await sbx.runCode(code, opts))
    out.frame = await runCode(FRAME)
    out.big_frame = await runCode("import pandas as pd\npd.DataFrame({'n': range(200_000)})")
    for (const [name, code] of Object.entries(CHARTS)) out[name] = await runCode(code)
  } catch (err) {
    out.unexpected = describeError(err)
    throw err
  } finally {
    out.cleanup = await attempt(() => sbx.kill())
  }
  return out
}

run(scenario)
