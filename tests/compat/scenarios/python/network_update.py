"""``update_network`` on a running sandbox: a host the create did not allow becomes reachable,
a host beyond the operator's ceiling is refused, and an empty update closes it again.

Arguments: the URL to fetch (plain HTTP through the proxy) and its host."""

from __future__ import annotations

from typing import Any

from _common import attempt, run
from e2b import Sandbox


def scenario(args: list[str]) -> dict[str, Any]:
    url, host = args
    out: dict[str, Any] = {}
    sandbox = Sandbox.create("base")

    def fetch() -> str:
        result = sandbox.commands.run(f"curl -s -o /dev/null -w '%{{http_code}}' {url}")
        return str(result.stdout)

    try:
        out["before"] = fetch()
        sandbox.update_network({"allow_out": [host]})
        out["opened"] = fetch()
        network = sandbox.get_info().network
        out["info_allow_out"] = list((network or {}).get("allow_out") or [])
        out["beyond_ceiling"] = attempt(
            lambda: sandbox.update_network({"allow_out": [host, "example.com"]})
        )
        out["still_open"] = fetch()
        Sandbox.update_network(sandbox.sandbox_id, {})
        out["closed"] = fetch()
        out["unknown_sandbox"] = attempt(
            lambda: Sandbox.update_network("nosuchsandbox0000000000000", {})
        )
    finally:
        attempt(sandbox.kill)
    return out


if __name__ == "__main__":
    run(scenario)
