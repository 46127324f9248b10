"""Reading a model reply as an action: run code, call tools, or answer."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from sandgate.agents.execution import LANGUAGES
from sandgate.agents.providers import ToolCall

__all__ = ["Action", "CallTools", "FinalAnswer", "Malformed", "RunCode", "parse_action"]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class FinalAnswer:
    text: str

    @property
    def key(self) -> str:
        return "answer"


@dataclass(frozen=True)
class RunCode:
    language: str
    code: str

    @property
    def key(self) -> str:
        return (
            "code:" + hashlib.sha256(f"{self.language}\0{self.code.strip()}".encode()).hexdigest()
        )


@dataclass(frozen=True)
class CallTools:
    calls: tuple[ToolCall, ...]

    @property
    def key(self) -> str:
        text = json.dumps([[c.name, c.arguments] for c in self.calls], sort_keys=True)
        return "tools:" + hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Malformed:
    """The model's mistake, shown to it next turn (never our error)."""

    language: str

    @property
    def key(self) -> str:
        return f"malformed:{self.language}"


Action = FinalAnswer | RunCode | CallTools | Malformed


def parse_action(text: str, tool_calls: tuple[ToolCall, ...], default_language: str) -> Action:
    """Native tool calls win; else one fenced block is code; else the text is the answer."""
    if tool_calls:
        return CallTools(tool_calls)
    blocks = _FENCE.findall(text)
    if not blocks:
        return FinalAnswer(text.strip())
    runnable = [(LANGUAGES.get((tag or default_language).lower()), code) for tag, code in blocks]
    if len(runnable) != 1 or runnable[0][0] is None:
        tags = ", ".join(tag or "(none)" for tag, _ in blocks)
        return Malformed(tags)
    language, code = runnable[0]
    return RunCode(str(language), code)
