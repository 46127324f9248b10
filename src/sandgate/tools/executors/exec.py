"""``exec`` tools: a host executable with a command-line contract.

The argv comes from the configured ``command``; an element that is exactly ``{param}`` is
replaced by that argument's text (no shell is ever involved, GW-04). A value that would start
with ``-`` in such an element is refused, so an argument cannot become an option. The full
arguments also arrive as JSON on stdin; secrets arrive as environment variables named after
them. stdout is the result (parsed as JSON when it is JSON), truncated to the output limit; a
non-zero exit fails the call with stderr. On timeout or cancellation the whole process group
is killed.

SECURITY: the process starts in a clean environment, exactly the tool's configured ``env``
plus its secrets: nothing of the gateway's own environment (``PATH``, ``HOME``, ``PWD``,
credentials the operator exported) reaches a tool, so none of it can come back in a result.
Without ``PATH`` a bare command name is looked up in ``/bin:/usr/bin`` only. Each call runs in
a private working directory of its own (mode 0700, under ``$SANDGATE_HOME/tools/work``),
removed when the call ends, never in the gateway's working directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

from sandgate.errors import InvalidArguments, ToolFailed, ToolTimeout
from sandgate.tools.executors._output import TRUNCATION_MARKER, read_bounded
from sandgate.tools.tool import ToolContext

__all__ = ["ExecExecutor"]

_WHOLE = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_STDERR_LIMIT = 8 * 1024


class ExecExecutor:
    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self._command = command
        self._env = env

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        argv = [self._expand(part, arguments) for part in self._command]
        env = {**self._env, **context.secrets}
        workdir = _private_directory(context.home)
        try:
            return await self._run(argv, env, workdir, arguments, context)
        finally:
            await asyncio.to_thread(shutil.rmtree, workdir, True)

    async def _run(
        self,
        argv: list[str],
        env: dict[str, str],
        workdir: Path,
        arguments: dict[str, Any],
        context: ToolContext,
    ) -> Any:
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd=workdir,
                start_new_session=True,
            )
        except OSError as exc:
            raise ToolFailed(f"{context.tool} cannot start {argv[0]}: {exc.strerror}") from None
        try:
            async with asyncio.timeout(context.timeout_s):
                out, err, code = await self._communicate(process, arguments, context.output_limit)
        except TimeoutError:
            raise ToolTimeout(
                f"{context.tool} did not finish within {context.timeout_s:g}s and was killed"
            ) from None
        finally:
            _kill_group(process)
            with contextlib.suppress(ProcessLookupError):
                await process.wait()
        stdout, truncated = out
        if code != 0:
            message = err.decode("utf-8", "replace").strip() or f"exit status {code}"
            raise ToolFailed(f"{context.tool} failed: {message}")
        text = stdout.decode("utf-8", "replace")
        if truncated:
            return text + TRUNCATION_MARKER.format(limit=context.output_limit)
        try:
            return json.loads(text)
        except ValueError:
            return text

    @staticmethod
    async def _communicate(
        process: asyncio.subprocess.Process, arguments: dict[str, Any], limit: int
    ) -> tuple[tuple[bytes, bool], bytes, int]:
        if process.stdin is None or process.stdout is None or process.stderr is None:
            raise ToolFailed("tool process has no pipes")
        stdin = process.stdin
        try:
            # A tool need not read its arguments: it may have exited and closed the pipe.
            if not stdin.is_closing():
                stdin.write(json.dumps(arguments).encode())
                await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass
        except RuntimeError:
            if not stdin.is_closing():  # uvloop's word for "the reader is gone"
                raise
        finally:
            stdin.close()
        out, (err, _) = await asyncio.gather(
            read_bounded(process.stdout, limit), read_bounded(process.stderr, _STDERR_LIMIT)
        )
        return out, err, await process.wait()

    @staticmethod
    def _expand(part: str, arguments: dict[str, Any]) -> str:
        match = _WHOLE.match(part)
        if match is None:
            return part
        name = match.group(1)
        value = arguments.get(name)
        if value is None:
            raise InvalidArguments(f"argument '{name}' is required by this tool's command line")
        text = value if isinstance(value, str) else json.dumps(value)
        # SECURITY: a whole-element argument is data, never an option (GW-04).
        if text.startswith("-"):
            raise InvalidArguments(f"argument '{name}' must not start with '-'")
        return text


def _private_directory(home: Path) -> Path:
    """A fresh directory only this call uses (the parent is created mode 0700)."""
    parent = home / "tools" / "work"
    parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return Path(tempfile.mkdtemp(prefix="call-", dir=parent))


def _kill_group(process: asyncio.subprocess.Process) -> None:
    """Kills the tool's process group, including children the leader left behind when it
    exited: nothing a tool started outlives its call."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
