"""``sandgate policy``: check the policy rules of a configuration."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from sandgate.cli._common import ConfigOption, friendly_errors, load

policy_app = typer.Typer(help="Check the tool gateway's policy.", no_args_is_help=True)


@policy_app.command("lint")
@friendly_errors
def lint(
    as_json: Annotated[bool, typer.Option("--json", help="One JSON report.")] = False,
    config: ConfigOption = None,
) -> None:
    """Reports rules that can never match or never take effect; exits 1 if it finds any."""
    from sandgate.policy import lint as lint_policy
    from sandgate.tools.registry import tool_shapes

    cfg = load(config)
    findings = lint_policy(cfg.policy, tool_shapes(cfg.tools), [a.id for a in cfg.agents])
    if as_json:
        report = {
            "ok": not findings,
            "rules": len(cfg.policy.rules),
            "findings": [finding.as_dict() for finding in findings],
        }
        print(json.dumps(report))
    else:
        for finding in findings:
            print(finding.line())  # one unwrapped line each, for grep and CI logs
        summary = f"{len(cfg.policy.rules)} rules, {len(findings)} findings"
        print(summary if findings else f"{summary}: policy is clean")
    if findings:
        raise typer.Exit(1)
