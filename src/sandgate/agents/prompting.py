"""The prompts: templates in ``prompts/`` filled with the tool API, the skills index and the
agent's own instructions. Nothing here talks to a model."""

from __future__ import annotations

import keyword
from functools import cache
from importlib import resources
from string import Template
from typing import Any

from sandgate.agents.providers import ToolSpec
from sandgate.agents.skills import Skill, skills_index
from sandgate.config import AgentConfig
from sandgate.tools import Tool

__all__ = ["observation", "prompt", "system_prompt", "tool_api", "tool_specs"]

_TYPES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "list",
    "object": "dict",
}


@cache
def _template(name: str) -> Template:
    text = resources.files("sandgate.agents").joinpath("prompts", f"{name}.md").read_text()
    return Template(text)


def prompt(name: str, **values: Any) -> str:
    """Fills ``prompts/<name>.md``; a placeholder without a value is an error (our bug)."""
    return _template(name).substitute(**{k: str(v) for k, v in values.items()})


def system_prompt(agent: AgentConfig, tools: list[Tool], skills: list[Skill]) -> str:
    instructions = (
        f"\n## Instructions\n\n{agent.system_prompt.strip()}\n" if agent.system_prompt else ""
    )
    return prompt(
        "code" if agent.mode == "code" else "classic",
        agent_name=agent.name or agent.id,
        tool_api=tool_api(tools),
        skills=skills_index(skills),
        output_limit=agent.sandbox.output_limit,
        instructions=instructions,
    )


def tool_api(tools: list[Tool]) -> str:
    """Python signatures and descriptions of ``tools``, as the generated stubs expose them."""
    if not tools:
        return "(no tools are available to you)"
    blocks = []
    for tool in tools:
        params = _params(tool)
        signature = ", ".join(["*", *params]) if params else ""
        doc = (tool.description or tool.name).strip().replace("\n", " ")
        names = [f"{tool.name}.{a}" for a in tool.actions if a.isidentifier()] or [tool.name]
        lines = [f"tools.{name}({signature})" for name in names]
        lines.append(f"    {doc}")
        for pname, schema in tool.parameters.get("properties", {}).items():
            if pname == tool.action or not isinstance(schema, dict):
                continue
            if schema.get("description"):
                lines.append(f"    {pname}: {schema['description']}")
        blocks.append("\n".join(lines))
    return "```python\n" + "\n\n".join(blocks) + "\n```"


def _params(tool: Tool) -> list[str]:
    required = set(tool.parameters.get("required", []))
    out = []
    for name, schema in tool.parameters.get("properties", {}).items():
        if name == tool.action or not name.isidentifier() or keyword.iskeyword(name):
            continue
        kind = schema.get("type") if isinstance(schema, dict) else None
        hint = _TYPES.get(kind, "Any") if isinstance(kind, str) else "Any"
        out.append(f"{name}: {hint}" if name in required else f"{name}: {hint} = None")
    return out


def tool_specs(tools: list[Tool]) -> tuple[ToolSpec, ...]:
    """Native tool definitions for classic mode (one per tool; the action is a parameter)."""
    return tuple(ToolSpec(t.name, t.description or t.name, t.parameters) for t in tools)


def observation(
    exit_code: int, stdout: str, stderr: str, duration_s: float, notes: list[str]
) -> str:
    return prompt(
        "observation",
        exit_code=exit_code,
        timing_note=f" ({duration_s:.1f}s)",
        stdout=stdout or "(empty)",
        stderr=stderr or "(empty)",
        notes="".join(f"\nNote: {n}" for n in notes),
    )
