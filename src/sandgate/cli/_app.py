"""Assembles the ``sandgate`` command from its groups."""

from __future__ import annotations

import typer

from sandgate.cli.approvals import approvals_app
from sandgate.cli.audit import audit_app
from sandgate.cli.chat import chat
from sandgate.cli.doctor import doctor
from sandgate.cli.env import env
from sandgate.cli.keys import keys_app
from sandgate.cli.mcp import mcp
from sandgate.cli.policy import policy_app
from sandgate.cli.run import run
from sandgate.cli.runs import runs_app
from sandgate.cli.sandbox import sandbox_app
from sandgate.cli.serve import serve
from sandgate.cli.snapshots import snapshots_app
from sandgate.cli.templates import templates_app
from sandgate.cli.tools import tools_app
from sandgate.cli.workflows import workflows_app

app = typer.Typer(
    name="sandgate",
    help="Sandgate: E2B-compatible sandboxes for AI agents, on your own machine.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.command("serve")(serve)
app.command("env")(env)
app.command("doctor")(doctor)
app.add_typer(keys_app, name="keys")
app.add_typer(templates_app, name="templates")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(snapshots_app, name="snapshots")
app.command("run")(run)
app.add_typer(tools_app, name="tools")
app.add_typer(policy_app, name="policy")
app.add_typer(audit_app, name="audit")
app.add_typer(approvals_app, name="approvals")
app.add_typer(runs_app, name="runs")
app.add_typer(workflows_app, name="workflows")
app.command("chat")(chat)
app.command("mcp")(mcp)
