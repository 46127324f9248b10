"""Result.data for pandas DataFrames and Result.chart for matplotlib figures."""

from __future__ import annotations

from typing import Any

from _code import execution_dict
from _common import attempt, describe_error, run
from e2b_code_interpreter import Sandbox

FRAME = """
import pandas as pd
pd.DataFrame({
    "city": ["Oslo", "Rome"],
    "temp": [3.5, float("nan")],
    "when": pd.to_datetime(["2024-01-01", "2024-01-02"]),
})
"""

CHARTS = {
    "line": """
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
""",
    "scatter": """
import matplotlib.pyplot as plt
plt.figure()
plt.scatter([1, 2, 3], [4, 5, 6], label="first")
plt.scatter([7, 8], [9, 10], label="second")
plt.yscale("log")
plt.show()
""",
    "bar": """
import matplotlib.pyplot as plt
plt.figure()
plt.bar(["Author A", "Author B", "Author C"], [100, 200, 300], label="Books Sold")
plt.xlabel("Authors")
plt.ylabel("Number of Books Sold [units]")
plt.title("Book Sales")
plt.show()
""",
    "pie": """
import matplotlib.pyplot as plt
plt.figure()
plt.pie([90, 10], labels=["No", "Yes"])
plt.title("Early tomorrow?")
plt.show()
""",
    "box": """
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
ax.boxplot([[1, 2, 3, 4, 5, 40], [2, 3, 4]], labels=["A", "B"])
ax.set_title("Scores")
ax.set_xlabel("Class")
ax.set_ylabel("Score")
plt.show()
""",
    "super": """
import matplotlib.pyplot as plt
fig, axs = plt.subplots(1, 2)
fig.suptitle("Two charts")
axs[0].plot([1, 2, 3], [1, 4, 9])
axs[0].set_title("Squares")
axs[1].bar(["x", "y"], [3, 4])
plt.show()
""",
    "blank": """
import matplotlib.pyplot as plt
fig, ax = plt.subplots()
plt.show()
""",
}


def scenario(args: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sbx = Sandbox.create()
    try:
        out["frame"] = execution_dict(sbx.run_code(FRAME))
        out["big_frame"] = execution_dict(
            sbx.run_code("import pandas as pd\npd.DataFrame({'n': range(200_000)})")
        )
        for name, code in CHARTS.items():
            out[name] = execution_dict(sbx.run_code(code))
    except Exception as exc:
        out["unexpected"] = describe_error(exc)
        raise
    finally:
        out["cleanup"] = attempt(sbx.kill)
    return out


if __name__ == "__main__":
    run(scenario)
