"""Workload identity (``iam``): a sandbox registers a token with ``Secret.iam_token`` and its
``network.rules`` put it in ``Authorization`` for the bound host through a ``transform``
callable (``ctx.iam.tokens[name]``); ``update_network`` may use the registered name only.

Arguments: the bound host, the token's audience and two HTTPS URLs on the host that echo
request headers (before and after the update)."""

from __future__ import annotations

from typing import Any

from _common import attempt, run
from e2b import Sandbox, Secret


def scenario(args: list[str]) -> dict[str, Any]:
    host, audience, url, url_after = args
    out: dict[str, Any] = {}
    sandbox = Sandbox.create(
        "base",
        iam={"tokens": {"aws": Secret.iam_token(audience=audience, token_type="JWT-SVID")}},
        network={
            "rules": {
                host: [
                    {
                        "transform": lambda ctx: {
                            "headers": {"Authorization": f"Bearer {ctx.iam.tokens['aws']}"}
                        }
                    }
                ]
            }
        },
    )
    try:
        result = sandbox.commands.run(f"curl -sS -D - {url}")
        out["request"] = {"exit_code": result.exit_code, "stdout": result.stdout}
        out["env"] = sandbox.commands.run("env").stdout
        out["info_rules"] = (sandbox.get_info().network or {}).get("rules")
        out["unregistered"] = attempt(
            lambda: sandbox.update_network(
                {
                    "rules": {
                        host: [
                            {"transform": lambda ctx: {"headers": {"X-Id": ctx.iam.tokens["gcp"]}}}
                        ]
                    }
                }
            )
        )
        sandbox.update_network(
            {
                "rules": {
                    host: [
                        {
                            "transform": lambda ctx: {
                                "headers": {"Authorization": f"Token {ctx.iam.tokens['aws']}"}
                            }
                        }
                    ]
                }
            }
        )
        after = sandbox.commands.run(f"curl -sS -D - {url_after}")
        out["after"] = {"exit_code": after.exit_code, "stdout": after.stdout}
    finally:
        attempt(sandbox.kill)
    out["wrong_type"] = attempt(
        lambda: Sandbox.create(
            "base", iam={"tokens": {"aws": {"audience": audience, "token_type": "OIDC"}}}
        )
    )
    return out


if __name__ == "__main__":
    run(scenario)
