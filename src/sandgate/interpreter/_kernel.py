"""One Jupyter kernel process and the client channels to it, via ``jupyter_client``.

A kernel runs as the server's own user, or as another user of the sandbox through ``sudo``
(Sandgate's shim, which asks the guest; signals sent to it reach the kernel)."""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any, cast

from jupyter_client.manager import AsyncKernelManager

from ._events import Event, event_for
from ._state import KernelRecord, process_start_time

__all__ = ["Kernel", "KernelDied", "KernelStartError"]

_START_TIMEOUT_S = 60.0
#: How long to wait for a cell's shell reply once its iopub stream went idle.
_REPLY_WAIT_S = 2.0
_POLL_S = 1.0
_NUDGE_TRIES = 30
#: Deno's kernel may publish a cell's last output just after its ``idle`` status; we read
#: on until IOPub has been quiet this long. Other kernels keep Jupyter's ordering.
_TRAILING_QUIET_S = {"deno": 0.1}


class KernelStartError(RuntimeError):
    """The kernel process did not start or did not answer in time."""


class KernelDied(RuntimeError):
    """The kernel process exited while a cell ran. ``cell_started`` says whether the kernel
    had accepted the cell (``execute_input``) by then: when it had not, the code never ran,
    so running it on a fresh kernel does not run it twice."""

    def __init__(self, message: str, *, cell_started: bool = False) -> None:
        super().__init__(message)
        self.cell_started = cell_started


class Kernel:
    """A kernel named ``kernel_name`` (a Jupyter kernel spec) started in ``cwd`` with ``env``;
    ``setup`` is code run silently after every start and restart. ``user`` names another
    user of the sandbox to run it as (``None``: the server's user).

    Not safe for concurrent ``run`` calls: the owner serialises them (``Context``).
    """

    def __init__(
        self,
        kernel_name: str,
        cwd: str,
        env: dict[str, str],
        setup: str | None = None,
        *,
        user: str | None = None,
    ) -> None:
        self.kernel_name = kernel_name
        self._cwd = cwd
        self._env = env
        self._setup = setup
        self._user = user
        self._manager: Any = None
        self._client: Any = None

    async def start(self) -> None:
        """Starts the process and waits until it answers; raises ``KernelStartError``."""
        manager = AsyncKernelManager(kernel_name=self.kernel_name)
        cwd = self._cwd
        try:
            if self._user is not None:
                spec = manager.kernel_spec
                spec.argv = [*_sudo(self._user, cwd), *spec.argv]
                cwd = "/"
            await manager.start_kernel(cwd=cwd, env=dict(self._env))
        except Exception as exc:
            raise KernelStartError(f"cannot start the {self.kernel_name} kernel: {exc}") from exc
        self._manager = manager
        try:
            await self._connect()
        except KernelStartError:
            await self.shutdown()
            raise

    def record(self) -> KernelRecord | None:
        """The running process, for ``_state``; ``None`` when there is none."""
        pid = getattr(getattr(self._manager, "provisioner", None), "pid", None)
        if not isinstance(pid, int):
            return None
        started = process_start_time(pid)
        return KernelRecord(pid, started) if started is not None else None

    async def _connect(self) -> None:
        client = self._manager.client()
        client.start_channels()
        try:
            await client.wait_for_ready(timeout=_START_TIMEOUT_S)
        except RuntimeError as exc:
            client.stop_channels()
            hint = ""
            if self._user is not None:
                hint = f" (it runs as {self._user} through sudo: is sudo allowed in this sandbox?)"
            raise KernelStartError(
                f"the {self.kernel_name} kernel did not answer: {exc}{hint}"
            ) from exc
        self._client = client
        await self._nudge()
        if self._setup:
            await self.run(self._setup, _raise_on_error, silent=True)

    async def _nudge(self) -> None:
        """Waits until IOPub delivers: a subscription made just now misses what the kernel
        publishes before it is joined, so we ask for kernel info until its status arrives."""
        for _ in range(_NUDGE_TRIES):
            msg_id = self._client.kernel_info()
            try:
                while True:
                    msg = await self._client.get_iopub_msg(timeout=_POLL_S)
                    if msg.get("parent_header", {}).get("msg_id") == msg_id:
                        await self._drain_shell()
                        return
            except queue.Empty:
                continue
        raise KernelStartError(f"the {self.kernel_name} kernel publishes no output")

    async def is_alive(self) -> bool:
        return self._manager is not None and bool(await self._manager.is_alive())

    async def interrupt(self) -> None:
        """Interrupts the running cell (SIGINT or an interrupt message, per the kernel
        spec); a no-op when the kernel is gone."""
        if await self.is_alive():
            await self._manager.interrupt_kernel()

    async def restart(self) -> None:
        """Replaces the process with a fresh one (all state is lost); starts one if the
        previous process is gone. Raises ``KernelStartError``."""
        if self._manager is None:
            await self.start()
            return
        if self._client is not None:
            self._client.stop_channels()
            self._client = None
        try:
            await self._manager.restart_kernel(now=True)
        except Exception as exc:
            raise KernelStartError(f"cannot restart the {self.kernel_name} kernel: {exc}") from exc
        await self._connect()

    async def shutdown(self) -> None:
        """Stops the process; idempotent."""
        if self._client is not None:
            self._client.stop_channels()
            self._client = None
        if self._manager is not None:
            manager, self._manager = self._manager, None
            try:
                await manager.shutdown_kernel(now=True)
            except Exception:  # best effort: the process may be gone already
                await manager.cleanup_resources()

    async def run(self, code: str, emit: Callable[[Event], None], *, silent: bool = False) -> None:
        """Executes ``code`` and passes each event of the cell to ``emit`` until the kernel
        is idle again. Raises ``KernelDied`` if the process exits first.

        A kernel that has just stopped a cell with an error (an interrupt included) aborts
        requests that reach it in the same moment (ipykernel's ``stop_on_error``); such a cell
        never ran, so it is sent once more.
        """
        if await self._run_once(code, emit, silent=silent) == "aborted":
            await self._run_once(code, emit, silent=silent)

    async def _run_once(
        self, code: str, emit: Callable[[Event], None], *, silent: bool
    ) -> str | None:
        """One execute request; returns the status of its reply (None if none came)."""
        client = self._client
        if client is None:
            raise KernelDied(f"the {self.kernel_name} kernel is not running")
        msg_id = cast(
            str,
            client.execute(
                code, silent=silent, store_history=not silent, allow_stdin=False, stop_on_error=True
            ),
        )
        started = False
        while True:
            try:
                msg = await client.get_iopub_msg(timeout=_POLL_S)
            except queue.Empty:
                if not await self.is_alive():
                    raise KernelDied(
                        f"the {self.kernel_name} kernel exited", cell_started=started
                    ) from None
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            msg_type = str(msg["header"]["msg_type"])
            content = dict(msg.get("content") or {})
            started = started or msg_type == "execute_input"
            if msg_type == "status" and content.get("execution_state") == "idle":
                break
            event = event_for(msg_type, content)
            if event is not None:
                emit(event)
        quiet = _TRAILING_QUIET_S.get(self.kernel_name)
        while quiet is not None:
            try:
                msg = await client.get_iopub_msg(timeout=quiet)
            except queue.Empty:
                break
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                event = event_for(str(msg["header"]["msg_type"]), dict(msg.get("content") or {}))
                if event is not None:
                    emit(event)
        status = await self._reply_status(msg_id)
        await self._drain_shell()
        return status

    async def _reply_status(self, msg_id: str) -> str | None:
        """The status (``ok``, ``error``, ``aborted``) of the shell reply to ``msg_id``."""
        client = self._client
        if client is None:
            return None
        while True:
            try:
                reply = await client.get_shell_msg(timeout=_REPLY_WAIT_S)
            except queue.Empty:
                return None
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                return str((reply.get("content") or {}).get("status", ""))

    async def _drain_shell(self) -> None:
        while True:
            try:
                await self._client.get_shell_msg(timeout=0)
            except queue.Empty:
                return


def _sudo(user: str, cwd: str) -> list[str]:
    """The command prefix that runs a kernel as ``user`` in ``cwd``. sudo enters ``cwd`` as
    the user (the server may not be allowed to). The kernel is then a child of the guest,
    PID 1 of the sandbox, which ipykernel would take for "my parent has exited" and quit:
    ``JPY_PARENT_PID=1`` turns that watch off (the server stops its kernels itself)."""
    return ["sudo", "-n", "-u", user, "-H", "-D", cwd, "--", "JPY_PARENT_PID=1"]


def _raise_on_error(event: Event) -> None:
    if event["type"] == "error":
        raise KernelStartError(f"kernel setup failed: {event['name']}: {event['value']}")
