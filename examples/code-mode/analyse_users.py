"""Reads every user, prints a report, then tries one write it is not allowed to make.

This is what a model writes in code mode: one script, many tool calls, one small result.
"""

from collections import Counter

import sandgate_tools as tools

keys = tools.kv.list(prefix="user:")
users = [tools.kv.get(key=f"user:{n}") for n in range(1, 51)]

by_city = Counter(u["city"] for u in users)
by_plan = Counter(u["plan"] for u in users)
spend = sorted(users, key=lambda u: u["monthly_spend"], reverse=True)

print(f"users: {len(users)} (kv lists {len(keys)} user keys)")
print("by city: " + ", ".join(f"{c}={n}" for c, n in sorted(by_city.items())))
print("by plan: " + ", ".join(f"{p}={n}" for p, n in sorted(by_plan.items())))
print(f"total monthly spend: {sum(u['monthly_spend'] for u in users):.2f}")
print("top 3 spenders: " + ", ".join(f"{u['name']} ({u['monthly_spend']})" for u in spend[:3]))

try:
    tools.kv.set(key="report:latest", value={"users": len(users)})
    print("unexpected: the write was allowed")
except tools.ToolError as exc:
    print(f"write refused as expected: {exc.code}")
