"""Execution contexts: a language, a working directory, a user and a lazily started kernel.

Cells of one context run one at a time, in arrival order. ``Contexts`` keeps them in
creation order, with the default python and javascript contexts first, and saves them
(``_state``) whenever they or their kernels change, so a restarted server brings back the
same contexts. A context whose kernel died between cells, or whose server was restarted,
gets a fresh kernel on its next cell, and that cell's output starts with a note on stderr
saying the earlier state is lost.
"""

from __future__ import annotations

import asyncio
import enum
import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._events import Event, error_event, now_iso
from ._kernel import Kernel, KernelDied, KernelStartError
from ._languages import Language, UnknownLanguage, language_named
from ._options import DEFAULT_CWD
from ._prestart import Prestarted
from ._state import SavedContext, State, StateFile, stop_leftover

__all__ = ["Context", "Contexts", "Execution", "UnknownContext"]

_RESTORE_TIMEOUT_S = 10.0
_KERNEL_GONE = (
    "[sandgate: the {language} kernel of this context had stopped (killed or crashed); "
    "a new one runs this cell and the context's earlier state is lost]\n"
)
_SERVER_RESTARTED = (
    "[sandgate: the code interpreter was restarted; a new {language} kernel runs this cell "
    "and the context's earlier state is lost]\n"
)


class UnknownContext(KeyError):
    """No context has that id."""


class ExecutionState(enum.Enum):
    QUEUED = "queued"
    """Waiting for the context's previous cell."""
    RUNNING = "running"
    """Sent to the kernel; an interrupt reaches it."""
    DONE = "done"
    """The kernel is idle again (or was restarted); nothing left to interrupt."""


class Execution:
    """One ``/execute`` call: its events go to ``emit``; ``cancel()`` interrupts it."""

    def __init__(self, emit: Callable[[Event], None], max_output: int) -> None:
        self.state = ExecutionState.QUEUED
        self._emit = emit
        self._max_output = max_output
        self._output = 0
        self._interrupt: Callable[[], None] | None = None
        self.cancelled = False
        self.truncated = False

    def emit(self, event: Event) -> None:
        """Forwards ``event`` unless the output limit was hit; hitting it interrupts."""
        if self.truncated:
            return
        if event["type"] in ("stdout", "stderr", "result"):
            self._output += sum(len(str(v)) for k, v in event.items() if k != "timestamp")
            if self._output > self._max_output:
                self.truncated = True
                limit = f"{self._max_output} bytes"
                self._emit(
                    {
                        "type": "stderr",
                        "text": f"\n[sandgate: output truncated after {limit}]\n",
                        "timestamp": event.get("timestamp", ""),
                    }
                )
                self._emit(
                    error_event(
                        "OutputLimitExceeded",
                        f"the cell produced more than {limit} of output and was interrupted; "
                        "the context's state is kept",
                        "",
                    )
                )
                self.cancel()
                return
        self._emit(event)

    def bind(self, interrupt: Callable[[], None]) -> None:
        """Sets how ``cancel`` reaches the kernel once the cell runs."""
        self._interrupt = interrupt

    def cancel(self) -> None:
        """Interrupts the cell if it runs, or skips it if still queued. Idempotent."""
        self.cancelled = True
        if self.state is ExecutionState.RUNNING and self._interrupt is not None:
            self._interrupt()


class Context:
    """A language, a cwd, a user (``None``: the server's) and a kernel started on first use.

    ``on_change`` is called whenever the kernel process changes (started, restarted,
    stopped), so the owner can save the state.
    """

    def __init__(
        self,
        language: Language,
        cwd: str,
        env: dict[str, str],
        max_output: int,
        *,
        user: str | None = None,
        context_id: str | None = None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.id = context_id or str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.user = user
        self._env = env
        self._max_output = max_output
        self._on_change = on_change
        self._kernel: Kernel | None = None
        #: The version of the sandbox-level environment this context's kernel has applied.
        self._applied_env: int | None = None
        #: A note for the next cell: its state was lost since the previous one.
        self.state_lost: str | None = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "language": self.language.name, "cwd": self.cwd}

    def kernel(self) -> Kernel | None:
        return self._kernel

    async def start(self, prestarted: Prestarted | None = None) -> None:
        """Starts the kernel unless it runs; raises ``KernelStartError``. ``prestarted``
        becomes its process if it fits (``Kernel.start``), and is stopped otherwise."""
        try:
            async with self._lock:
                await self._ensure_kernel(prestarted)
        finally:
            if prestarted is not None:
                prestarted.discard()  # a no-op once the kernel has it, or stopped it

    async def _ensure_kernel(self, prestarted: Prestarted | None = None) -> Kernel:
        if self._kernel is not None and not await self._kernel.is_alive():
            self.state_lost = _KERNEL_GONE.format(language=self.language.name)
            await self._recover(self._kernel)
        if self._kernel is None:
            await self._make_cwd()
            kernel = Kernel(
                self.language.kernel,
                self.cwd,
                self._env,
                self.language.setup(self._max_output),
                user=self.user,
            )
            await kernel.start(prestarted)
            self._kernel = kernel
            self._applied_env = None
            self._on_change()
        return self._kernel

    async def _make_cwd(self) -> None:
        """Creates the working directory, as the context's user; raises ``KernelStartError``."""
        if self.user is None:
            try:
                os.makedirs(self.cwd, exist_ok=True)
            except OSError as exc:
                raise KernelStartError(
                    f"cannot use {self.cwd} as working directory: {exc}"
                ) from exc
            return
        mkdir = await asyncio.create_subprocess_exec(
            "sudo",
            "-n",
            "-u",
            self.user,
            "--",
            "mkdir",
            "-p",
            "--",
            self.cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            cwd="/",
        )
        _, error = await mkdir.communicate()
        if mkdir.returncode != 0:
            problem = error.decode(errors="replace").strip() or f"status {mkdir.returncode}"
            raise KernelStartError(
                f"cannot use {self.cwd} as working directory as {self.user} "
                f"(through sudo: is sudo allowed in this sandbox?): {problem}"
            )

    async def restart(self) -> None:
        """Restarts the kernel, clearing all state; waits for a running cell first."""
        async with self._lock:
            self.state_lost = None
            if self._kernel is None:
                await self._ensure_kernel()
            else:
                self._applied_env = None
                try:
                    await self._kernel.restart()
                finally:
                    self._on_change()

    async def shutdown(self) -> None:
        async with self._lock:
            if self._kernel is not None:
                kernel, self._kernel = self._kernel, None
                await kernel.shutdown()
                self._on_change()

    async def execute(self, code: str, env_vars: dict[str, str], execution: Execution) -> None:
        """Runs ``code`` with ``env_vars`` set for this cell only, reporting to
        ``execution``. Never raises for kernel trouble: it becomes an ``error`` event.

        A kernel found dead before the cell began (killed between cells) is replaced and the
        cell runs on the new one, after a note on stderr; one that dies while the cell runs
        ends the cell with a ``KernelDied`` error."""
        async with self._lock:
            for last_try in (False, True):
                if execution.cancelled:
                    return
                try:
                    kernel = await self._ensure_kernel()
                except KernelStartError as exc:
                    execution.emit(error_event("KernelStartError", str(exc), ""))
                    return
                if self.state_lost is not None:
                    note = {"type": "stderr", "text": self.state_lost, "timestamp": now_iso()}
                    execution.emit(note)
                    self.state_lost = None
                try:
                    await self._run_cell(kernel, code, env_vars, execution)
                    return
                except KernelDied as exc:
                    if exc.cell_started or last_try:
                        execution.emit(
                            error_event(
                                "KernelDied",
                                f"{exc} while running this cell (out of memory, a crash or an "
                                "explicit exit); it was restarted and the context's state is lost",
                                "",
                            )
                        )
                        await self._recover(kernel)
                        return
                    self.state_lost = _KERNEL_GONE.format(language=self.language.name)
                    await self._recover(kernel)

    async def _run_cell(
        self, kernel: Kernel, code: str, env_vars: dict[str, str], execution: Execution
    ) -> None:
        execution.bind(lambda: self._spawn(kernel.interrupt()))
        sandbox_env = SANDBOX_ENV.current()
        if sandbox_env.version != self._applied_env:
            if sandbox_env.values:
                code_env = self.language.export_env(sandbox_env.values)
                await kernel.run(code_env, _ignore, silent=True)
            self._applied_env = sandbox_env.version
        if env_vars:
            await kernel.run(self.language.set_env(env_vars), _ignore, silent=True)
        execution.state = ExecutionState.RUNNING
        try:
            await kernel.run(code, execution.emit)
        finally:
            execution.state = ExecutionState.DONE
            if env_vars and await kernel.is_alive():
                try:
                    async with asyncio.timeout(_RESTORE_TIMEOUT_S):
                        await kernel.run(self.language.restore_env(env_vars), _ignore, silent=True)
                except KernelDied as exc:  # the cell did run: it must not run again
                    raise KernelDied(str(exc), cell_started=True) from exc

    async def _recover(self, kernel: Kernel) -> None:
        self._applied_env = None
        try:
            await kernel.restart()
        except KernelStartError:
            await kernel.shutdown()
            self._kernel = None
        finally:
            self._on_change()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


@dataclass(frozen=True)
class _EnvSnapshot:
    version: int
    values: dict[str, str]


class SandboxEnv:
    """The sandbox-level environment as the gateway publishes it in a JSON file.

    Kernels started at boot inherit the environment the server was started with; a sandbox
    taken from a warm pool gets its environment later, so every execution checks the file
    (one ``stat``) and a kernel applies a changed environment before running the cell.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._snapshot = _EnvSnapshot(0, {})

    def current(self) -> _EnvSnapshot:
        try:
            version = os.stat(self._path).st_mtime_ns
        except OSError:
            return self._snapshot
        if version != self._snapshot.version:
            try:
                with open(self._path, encoding="utf-8") as handle:
                    data = json.load(handle)
            except (OSError, ValueError):
                return self._snapshot
            if isinstance(data, dict):
                values = {str(k): str(v) for k, v in data.items()}
                self._snapshot = _EnvSnapshot(version, values)
        return self._snapshot


SANDBOX_ENV = SandboxEnv(os.environ.get("SANDGATE_INTERPRETER_ENV_FILE", "/run/sandgate/envs.json"))


def _ignore(event: Event) -> None:
    del event


class Contexts:
    """Every context of this sandbox, in creation order, saved to ``state`` (if given)
    whenever a context or its kernel changes."""

    def __init__(
        self, env: dict[str, str], max_output: int, state: StateFile | None = None
    ) -> None:
        self._env = env
        self._max_output = max_output
        self._state = state
        self._contexts: dict[str, Context] = {}
        self._defaults: dict[str, str] = {}

    def __iter__(self) -> Any:
        return iter(list(self._contexts.values()))

    def get(self, context_id: str) -> Context:
        try:
            return self._contexts[context_id]
        except KeyError:
            raise UnknownContext(context_id) from None

    def default(self, language_name: str | None) -> Context:
        """The default context of a language (created lazily); raises ``UnknownLanguage``."""
        language = language_named(language_name)
        owner = language_named(language.default_context)
        context_id = self._defaults.get(owner.name)
        if context_id is None or context_id not in self._contexts:
            return self.create(owner, DEFAULT_CWD, default=True)
        return self._contexts[context_id]

    def create(
        self,
        language: Language,
        cwd: str,
        *,
        user: str | None = None,
        default: bool = False,
        context_id: str | None = None,
    ) -> Context:
        context = Context(
            language,
            cwd,
            self._env,
            self._max_output,
            user=user,
            context_id=context_id,
            on_change=self.save,
        )
        self._contexts[context.id] = context
        if default:
            self._defaults[language.name] = context.id
        self.save()
        return context

    async def remove(self, context_id: str) -> None:
        context = self.get(context_id)
        del self._contexts[context_id]
        await context.shutdown()
        self.save()

    async def shutdown(self) -> None:
        for context in list(self._contexts.values()):
            await context.shutdown()

    def restore(self) -> list[str]:
        """Brings back the contexts a previous server saved (fresh kernels, started on first
        use) and stops the kernels it left running. Returns what it did, for the log."""
        if self._state is None:
            return []
        saved = self._state.load()
        done = [
            f"stopped a leftover kernel (pid {k.pid})" for k in saved.kernels if stop_leftover(k)
        ]
        for item in saved.contexts:
            try:
                language = language_named(item.language)
            except UnknownLanguage:
                continue
            if item.id in self._contexts or (item.default and language.name in self._defaults):
                continue
            context = self.create(
                language, item.cwd, user=item.user, default=item.default, context_id=item.id
            )
            context.state_lost = _SERVER_RESTARTED.format(language=language.name)
            done.append(f"restored context {item.id} ({language.name})")
        self.save()
        return done

    def save(self) -> None:
        if self._state is None:
            return
        defaults = set(self._defaults.values())
        contexts = [
            SavedContext(c.id, c.language.name, c.cwd, c.user, c.id in defaults)
            for c in self._contexts.values()
        ]
        records = [c.kernel() for c in self._contexts.values()]
        kernels = [record for k in records if k is not None and (record := k.record())]
        self._state.save(State(contexts, kernels))
