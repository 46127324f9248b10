"""Rendering an agent run's events in a terminal (``sandgate chat``, ``sandgate runs show``)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from rich.panel import Panel
from rich.syntax import Syntax

__all__ = ["render_event"]

_LEXERS = {"python": "python", "bash": "bash", "javascript": "javascript", "typescript": "ts"}


def render_event(console: Console, kind: str, data: dict[str, Any], *, trace: bool) -> None:
    """Prints one event; ``trace`` also prints model requests and token counts."""
    if kind == "run.started" and trace:
        console.print(f"[bold]run {data['run']}[/] agent={data['agent']} session={data['session']}")
        console.print(f"[bold cyan]user[/] {data['message']}")
    elif kind == "model.request" and trace:
        console.print(f"[dim]step {data['step']}: model request ({data['messages']} messages)[/]")
    elif kind == "text.delta":
        _model(console, data, trace=trace)
    elif kind == "code.started":
        lexer = _LEXERS.get(data["language"], "text")
        console.print(
            Panel(
                Syntax(data["code"], lexer, line_numbers=False, word_wrap=True),
                title=f"code ({data['language']})",
                title_align="left",
                border_style="blue",
            )
        )
    elif kind == "code.completed":
        _output(console, data)
    elif kind == "tool.started":
        console.print(f"[yellow]→ tool[/] {data['tool']} {json.dumps(data.get('arguments'))}")
    elif kind == "tool.completed":
        style = "green" if data["outcome"] == "allowed" else "red"
        action = f" {data['action']}" if data.get("action") else ""
        console.print(
            f"  [{style}]{data['outcome']:<8}[/] {data['tool']}{action}"
            f"  [dim]rule={data.get('rule') or '-'} audit=#{data.get('audit_seq')}[/]"
        )
    elif kind == "approval.required":
        console.print(
            f"[bold magenta]approval needed[/] {data['approval']}: {data['tool']} "
            f"{data.get('action') or ''} {json.dumps(data.get('arguments'))} "
            f"(rule {data.get('rule')})"
        )
    elif kind == "run.completed":
        usage = data["usage"]
        if trace:
            console.print(Markdown(data.get("answer") or ""))
        console.print(
            f"[dim]completed: {usage['model_calls']} model calls, {usage['prompt_tokens']}+"
            f"{usage['completion_tokens']} tokens, {usage['tool_calls']} tool calls[/]"
        )
    elif kind == "run.failed":
        console.print(
            f"[bold red]run {data['state']}[/] ({data['stop_reason']}): {data.get('error')}"
        )


def _model(console: Console, data: dict[str, Any], *, trace: bool) -> None:
    if trace:
        failed = [a for a in data.get("attempts", []) if not a["ok"]]
        for attempt in failed:
            console.print(
                f"[dim]  {attempt['provider']}/{attempt['model']} failed: {attempt['error']}[/]"
            )
        console.print(
            f"[dim]step {data['step']}: {data['model']} "
            f"{data['prompt_tokens']}+{data['completion_tokens']} tokens, "
            f"{data['duration_ms']:.0f} ms[/]"
        )
        console.print(f"[bold green]model[/] {data['text']}")
    for call in data.get("tool_calls", []):
        console.print(f"[dim]model asks for tool {call['name']}[/]")


def _output(console: Console, data: dict[str, Any]) -> None:
    style = "green" if data.get("exit_code") == 0 else "red"
    body = data.get("stdout") or ""
    if data.get("stderr"):
        body += ("\n" if body else "") + data["stderr"]
    notes = "".join(f"\nnote: {n}" for n in data.get("notes", []))
    console.print(
        Panel(
            (body.rstrip() or "(no output)") + notes,
            title=f"exit {data.get('exit_code')} · {data.get('duration_ms', 0):.0f} ms",
            title_align="left",
            border_style=style,
        )
    )
