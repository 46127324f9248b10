"""Running the model's code in a session's sandbox, through the guest.

Python runs in one long-lived process per session (``_driver.py``, tagged
``sandgate-agent-<session>``), so variables persist between turns and, since the guest keeps
the process when the gateway goes away, across a gateway restart too. Bash, JavaScript and
TypeScript run as one process per block (state persists through files). Output comes back
as its tail, ``output_limit`` characters per stream.

Trust: the code is the model's and runs as the sandbox user; nothing here trusts what it
prints. Result lines are matched by a random per-cell id; code that forges one can only
mislead the model that wrote it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import signal
import time
from importlib import resources
from typing import Literal

from sandgate._tasks import cancel_and_wait
from sandgate.agents.steps import CodeStep
from sandgate.errors import SandboxUnavailable
from sandgate.guest.client import Ended, GuestClient, GuestError, Output, ProcessStream
from sandgate.observability import tracing

__all__ = ["LANGUAGES", "SandboxCode"]

Language = Literal["python", "bash", "javascript", "typescript"]
LANGUAGES: dict[str, Language] = {
    "python": "python",
    "py": "python",
    "python3": "python",
    "bash": "bash",
    "sh": "bash",
    "shell": "bash",
    "javascript": "javascript",
    "js": "javascript",
    "node": "javascript",
    "typescript": "typescript",
    "ts": "typescript",
}
_WORK = "/tmp/sandgate-agent"
_MARK = b"\x1esandgate-cell "
_INTERRUPT_GRACE_S = 5.0
_SCRIPT = {
    "bash": (".sh", ["/bin/bash"]),
    "javascript": (".js", ["node"]),
    "typescript": (
        ".ts",
        [
            "/bin/bash",
            "-c",
            'if command -v deno >/dev/null; then exec deno run -A "$0"; '
            'else exec node --experimental-strip-types "$0"; fi',
        ],
    ),
}


class SandboxCode:
    """Runs code blocks for one session in its sandbox; one block at a time."""

    def __init__(self, guest: GuestClient, session_id: str, output_limit: int) -> None:
        self._guest = guest
        self._tag = f"sandgate-agent-{session_id}"
        self._script_tag = f"{self._tag}-script"
        self._limit = output_limit
        self._stream: ProcessStream | None = None
        self._reader: asyncio.Task[None] | None = None
        self._pending: dict[str, asyncio.Future[dict[str, object]]] = {}
        self._lock = asyncio.Lock()

    async def run(self, step: CodeStep, timeout_s: float) -> None:
        """Runs ``step.code`` and fills in the step's results. Raises ``SandboxUnavailable``
        when the sandbox cannot run anything; the code's own failures are results."""
        started = time.monotonic()
        async with self._lock:
            try:
                if step.language == "python":
                    await self._python(step, timeout_s)
                else:
                    await self._script(step, timeout_s)
            except GuestError as exc:
                raise SandboxUnavailable(
                    f"the sandbox could not run the code: {exc.message}"
                ) from None
        step.duration_ms = round((time.monotonic() - started) * 1000, 3)

    async def interrupt(self) -> None:
        """Interrupts the code running now (SIGINT: the Python cell ends with exit code 130;
        a script block is stopped); ``run`` then returns with what was printed. Idempotent."""
        for tag in (self._tag, self._script_tag):
            with contextlib.suppress(GuestError):
                await self._guest.signal(signal.SIGINT, tag=tag)

    async def close(self) -> None:
        """Stops reading (the Python process keeps running for the next run)."""
        if self._reader is not None:
            await cancel_and_wait(self._reader)
            self._reader = None
        if self._stream is not None:
            await self._stream.aclose()
            self._stream = None

    # -- python ---------------------------------------------------------------------------

    async def _python(self, step: CodeStep, timeout_s: float) -> None:
        await self._ensure_driver(step)
        cell = secrets.token_hex(8)
        parent = tracing.traceparent()
        if parent is not None:  # the driver sets it as TRACEPARENT while the cell runs
            trace = f"{_WORK}/cells/{cell}.trace"
            await self._guest.write_file(trace, parent.encode(), user="user")
        await self._guest.write_file(f"{_WORK}/cells/{cell}.py", step.code.encode(), user="user")
        future: asyncio.Future[dict[str, object]] = asyncio.get_running_loop().create_future()
        self._pending[cell] = future
        try:
            await self._guest.send_input(f"{cell} {self._limit}\n".encode(), tag=self._tag)
            result: dict[str, object] | None
            try:
                async with asyncio.timeout(timeout_s):
                    result = await asyncio.shield(future)
            except TimeoutError:
                step.timed_out = True
                result = await self._interrupt(future, step)
        finally:
            self._pending.pop(cell, None)
        if result is None:
            step.exit_code = 137
            return
        step.exit_code = int(str(result["exit_code"]))
        step.stdout, step.stderr = str(result["stdout"]), str(result["stderr"])
        step.stdout_bytes = int(str(result["stdout_bytes"]))
        step.stderr_bytes = int(str(result["stderr_bytes"]))
        self._note_truncation(step)
        if step.timed_out:
            step.notes.append(f"the code ran past its time limit ({timeout_s:g}s) and was stopped")

    async def _interrupt(
        self, future: asyncio.Future[dict[str, object]], step: CodeStep
    ) -> dict[str, object] | None:
        with contextlib.suppress(GuestError):
            await self._guest.signal(signal.SIGINT, tag=self._tag)
        try:
            async with asyncio.timeout(_INTERRUPT_GRACE_S):
                return await asyncio.shield(future)
        except TimeoutError:
            with contextlib.suppress(GuestError):
                await self._guest.signal(signal.SIGKILL, tag=self._tag)
            await self.close()
            step.notes.append(
                "the Python process did not stop when interrupted and was killed: "
                "variables from earlier code are gone"
            )
            return None

    async def _ensure_driver(self, step: CodeStep) -> None:
        if self._stream is not None:
            return
        try:
            self._stream = await self._guest.connect_process(tag=self._tag)
        except GuestError:
            driver = resources.files("sandgate.agents").joinpath("_driver.py").read_bytes()
            await self._guest.write_file(f"{_WORK}/driver.py", driver, user="user")
            self._stream = await self._guest.spawn(
                "python3",
                ["-u", f"{_WORK}/driver.py", f"{_WORK}/cells"],
                cwd="/home/user",
                user="user",
                tag=self._tag,
                stdin=True,
            )
            if step.number > 1:
                step.notes.append("a new Python process was started: earlier variables are gone")
        self._reader = asyncio.create_task(self._read(self._stream), name=self._tag)

    async def _read(self, stream: ProcessStream) -> None:
        buffer = b""
        try:
            async for event in stream:
                if isinstance(event, Output) and event.stream == "stdout":
                    buffer += event.data
                    *lines, buffer = buffer.split(b"\n")
                    for line in lines:
                        self._deliver(line)
                elif isinstance(event, Ended):
                    break
        except GuestError:
            pass
        finally:
            self._stream = None
            for future in self._pending.values():
                if not future.done():
                    future.set_result(
                        {
                            "exit_code": 137,
                            "stdout": "",
                            "stderr": "the Python process ended unexpectedly "
                            "(killed, out of memory, or os._exit)",
                            "stdout_bytes": 0,
                            "stderr_bytes": 0,
                        }
                    )

    def _deliver(self, line: bytes) -> None:
        if not line.startswith(_MARK):
            return
        try:
            result = json.loads(line[len(_MARK) :])
        except ValueError:
            return
        future = self._pending.get(str(result.get("cell")))
        if future is not None and not future.done():
            future.set_result(result)

    # -- other languages ------------------------------------------------------------------

    async def _script(self, step: CodeStep, timeout_s: float) -> None:
        suffix, argv = _SCRIPT[step.language]
        path = f"{_WORK}/cells/{secrets.token_hex(8)}{suffix}"
        await self._guest.write_file(path, step.code.encode(), user="user")
        stream = await self._guest.spawn(
            argv[0],
            [*argv[1:], path],
            cwd="/home/user",
            user="user",
            tag=self._script_tag,
            timeout_ms=max(1, int(timeout_s * 1000)),
        )
        out, err = _Tail(self._limit), _Tail(self._limit)
        async for event in stream:
            if isinstance(event, Output):
                (err if event.stream == "stderr" else out).add(event.data)
            elif isinstance(event, Ended):
                step.exit_code = event.exit_code
                step.timed_out = event.timed_out
        with contextlib.suppress(GuestError):
            await self._guest.remove(path, user="user")
        step.stdout, step.stdout_bytes = out.text(), out.total
        step.stderr, step.stderr_bytes = err.text(), err.total
        if step.exit_code == 127 and step.language != "bash":
            step.notes.append(f"{step.language} is not installed in this sandbox; use python")
        self._note_truncation(step)
        if step.timed_out:
            step.notes.append(f"the code ran past its time limit ({timeout_s:g}s) and was killed")

    def _note_truncation(self, step: CodeStep) -> None:
        for name, size in (("stdout", step.stdout_bytes), ("stderr", step.stderr_bytes)):
            if size > self._limit:
                step.notes.append(
                    f"{name} was {size} bytes; only its last {self._limit} characters are shown"
                )


class _Tail:
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._data = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        self._data += data
        if len(self._data) > self._limit * 4:
            del self._data[: len(self._data) - self._limit * 4]

    def text(self) -> str:
        return self._data.decode("utf-8", "replace")[-self._limit :]
