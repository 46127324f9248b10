"""``python`` tools: an entry point ``package.module:function`` loaded in the gateway.

The function is called as ``function(arguments, context)``; a coroutine function is awaited,
a plain one runs in a worker thread. Trust: the code is the operator's and runs with the
gateway's privileges; a plain function cannot be killed on timeout (the call fails, the
thread finishes on its own), so long-running work belongs in an ``exec`` tool.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Callable
from typing import Any

from sandgate.errors import ConfigError, SandgateError, ToolFailed
from sandgate.tools.tool import ToolContext

__all__ = ["PythonExecutor", "load_entry_point"]


def load_entry_point(entry: str) -> Callable[..., Any]:
    module_name, _, attribute = entry.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load tool entry point {entry}: {exc}") from None
    if not callable(function):
        raise ConfigError(f"tool entry point {entry} is not callable")
    return function  # type: ignore[no-any-return]


class PythonExecutor:
    def __init__(self, function: Callable[..., Any]) -> None:
        self._function = function

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        try:
            if inspect.iscoroutinefunction(self._function):
                return await self._function(arguments, context)
            return await asyncio.to_thread(self._function, arguments, context)
        except SandgateError:
            raise
        except Exception as exc:  # the tool's own failure, reported to the caller
            raise ToolFailed(f"{context.tool} failed: {exc}") from exc
