"""The analysis job: runs INSIDE the sandbox (uploaded by run.py).

Reads ``sales.csv`` next to it, writes ``out/summary.json`` and ``out/chart.png``.
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

here = Path(__file__).resolve().parent
out = here / "out"
out.mkdir(exist_ok=True)

sales = pd.read_csv(here / "sales.csv")
by_region = sales.groupby("region")["amount"].sum().sort_values(ascending=False)
summary = {
    "rows": len(sales),
    "total": float(sales["amount"].sum()),
    "by_region": {region: float(total) for region, total in by_region.items()},
    "top_region": str(by_region.index[0]),
}
(out / "summary.json").write_text(json.dumps(summary, indent=2))

fig, ax = plt.subplots(figsize=(6, 4))
by_region.plot.bar(ax=ax, title="Sales by region")
ax.set_ylabel("amount")
fig.tight_layout()
fig.savefig(out / "chart.png")
print(f"analysed {summary['rows']} rows; top region {summary['top_region']}")
