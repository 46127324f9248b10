"""One Jupyter kernel process and the client channels to it, via ``jupyter_client``.

A kernel runs as the server's own user, or as another user of the sandbox through ``sudo``
(Sandgate's shim, which asks the guest; signals sent to it reach the kernel)."""

from __future__ import annotations

import contextlib
import os
import queue
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

import zmq
from jupyter_client.kernelspec import KernelSpec, KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.paths import jupyter_path

try:
    from jupyter_client.provisioning import LocalProvisioner
except ImportError:  # jupyter_client before 7 has no provisioners: nothing is adopted
    LocalProvisioner = None

from ._events import Event, event_for
from ._prestart import KERNEL_NAME, Prestarted, lean_launcher
from ._state import KernelRecord, process_start_time

__all__ = ["Kernel", "KernelDied", "KernelStartError"]

_START_TIMEOUT_S = 60.0
#: How long to wait for a cell's shell reply once its iopub stream went idle.
_REPLY_WAIT_S = 2.0
_POLL_S = 1.0
#: How long a start waits for the kernel's first answer before checking that it still runs.
_READY_POLL_S = 0.25
#: Once the kernel has answered, how long to wait for a kernel-info request's status on
#: IOPub before asking again (the subscription joins within one reconnect interval).
_IOPUB_ASK_S = 0.01
#: The client sockets' reconnect interval (ZeroMQ's default is 100 ms). They connect before
#: the kernel listens, and every refused attempt would delay the kernel's first answer by up
#: to one interval.
_RECONNECT_IVL_MS = 10
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


class _KernelSpecs(KernelSpecManager):  # type: ignore[misc]
    """Finds a kernel spec where jupyter_client looks, in the same order, without what its
    lookup costs: the default search path imports IPython for one directory name, and the
    ``python3`` lookup imports ipykernel (together ~0.4 s of every server start here)."""

    def get_kernel_spec(self, kernel_name: str) -> Any:
        ipython_dir = os.environ.get("IPYTHONDIR") or os.path.expanduser("~/.ipython")
        for directory in [*jupyter_path("kernels"), os.path.join(ipython_dir, "kernels")]:
            resource_dir = os.path.join(directory, kernel_name.lower())
            if os.path.isfile(os.path.join(resource_dir, "kernel.json")):
                return KernelSpec.from_resource_dir(resource_dir)
        # Not installed as a spec (ipykernel's built-in one): jupyter_client's own lookup.
        return super().get_kernel_spec(kernel_name)


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

    async def start(self, prestarted: Prestarted | None = None) -> None:
        """Starts the process and waits until it answers; raises ``KernelStartError``.
        ``prestarted`` (``_prestart``) becomes the process if it runs what this start would
        run, and is stopped otherwise."""
        manager = AsyncKernelManager(
            kernel_name=self.kernel_name, kernel_spec_manager=_KernelSpecs()
        )
        cwd = self._cwd
        try:
            spec = manager.kernel_spec
            if prestarted is not None and not self._adopt(manager, spec, prestarted):
                prestarted.discard()  # now, not after the start it would compete with
            spec.argv = lean_launcher(spec.argv)
            if self._user is not None:
                spec.argv = [*_sudo(self._user, cwd), *spec.argv]
                cwd = "/"
            await manager.start_kernel(cwd=cwd, env=dict(self._env))
        except Exception as exc:
            if prestarted is not None:
                prestarted.discard()  # unless jupyter_client took it
            raise KernelStartError(f"cannot start the {self.kernel_name} kernel: {exc}") from exc
        self._manager = manager
        try:
            await self._connect()
        except KernelStartError:
            await self.shutdown()
            raise

    def _adopt(self, manager: Any, spec: Any, prestarted: Prestarted) -> bool:
        """Whether ``prestarted`` runs what ``manager`` would start for this kernel (spec,
        command, working directory, user and environment); if so, ``manager`` is set to
        take that process instead of launching one."""
        if _Adopting is None or prestarted.process.poll() is not None:
            return False
        metadata = spec.metadata if isinstance(spec.metadata, dict) else {}
        if not (
            self.kernel_name == KERNEL_NAME
            and self._user is None
            and self._cwd == prestarted.cwd
            and self._env == prestarted.env
            and os.path.realpath(spec.resource_dir) == os.path.realpath(prestarted.resource_dir)
            and list(spec.argv) == prestarted.spec_argv
            and not spec.env
            and spec.interrupt_mode == "signal"
            and not metadata.get("kernel_provisioner")
        ):
            return False
        manager.kernel_id = str(uuid.uuid4())
        manager.provisioner = _Adopting(
            prestarted, kernel_id=manager.kernel_id, kernel_spec=spec, parent=manager
        )
        return True

    def record(self) -> KernelRecord | None:
        """The running process, for ``_state``; ``None`` when there is none."""
        pid = getattr(getattr(self._manager, "provisioner", None), "pid", None)
        if not isinstance(pid, int):
            return None
        started = process_start_time(pid)
        return KernelRecord(pid, started) if started is not None else None

    async def _connect(self) -> None:
        client = self._manager.client()
        client.context.setsockopt(zmq.RECONNECT_IVL, _RECONNECT_IVL_MS)  # for its new sockets
        client.start_channels()
        self._client = client
        try:
            await self._await_answer()
        except KernelStartError:
            client.stop_channels()
            self._client = None
            raise
        if self._setup:
            await self.run(self._setup, _raise_on_error, silent=True)

    async def _await_answer(self) -> None:
        """Waits until the kernel answers on the shell channel and its IOPub reaches us.

        The first kernel-info request waits in the client's queue until the kernel listens,
        and its reply comes as soon as the kernel has started: no polling on the kernel's
        start. IOPub is a subscription, which misses whatever the kernel publishes before
        it is joined (the status of that first request, often), so then we ask again after
        ``_IOPUB_ASK_S``, backing off, until one request's status arrives.

        Not jupyter_client's ``wait_for_ready``: after the same check it waits for IOPub to
        fall quiet for 0.2 s, a fixed cost on every kernel start and restart. Asking every
        0.25 s (as this did) put the answer up to that late, on every start."""
        client = self._client
        deadline = time.monotonic() + _START_TIMEOUT_S
        asked = {client.kernel_info()}
        while not await self._shell_reply_to(asked):
            await self._check_starting(deadline)
        wait = _IOPUB_ASK_S
        while True:
            asked.add(client.kernel_info())
            try:
                while True:
                    msg = await client.get_iopub_msg(timeout=wait)
                    if msg.get("parent_header", {}).get("msg_id") in asked:
                        await self._drain_shell()
                        return
            except queue.Empty:
                wait = min(wait * 2, _READY_POLL_S)
            await self._check_starting(deadline)

    async def _shell_reply_to(self, asked: set[str]) -> bool:
        """Whether a reply to one of ``asked`` arrived within ``_READY_POLL_S``."""
        try:
            while True:
                reply = await self._client.get_shell_msg(timeout=_READY_POLL_S)
                if reply.get("parent_header", {}).get("msg_id") in asked:
                    return True
        except queue.Empty:
            return False

    async def _check_starting(self, deadline: float) -> None:
        """Raises ``KernelStartError`` when the kernel exited or ``deadline`` passed."""
        if not await self.is_alive():
            raise KernelStartError(
                f"the {self.kernel_name} kernel exited before it answered{self._hint()}"
            )
        if time.monotonic() > deadline:
            raise KernelStartError(
                f"the {self.kernel_name} kernel did not answer within "
                f"{_START_TIMEOUT_S:.0f}s{self._hint()}"
            )

    def _hint(self) -> str:
        if self._user is None:
            return ""
        return f" (it runs as {self._user} through sudo: is sudo allowed in this sandbox?)"

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


if LocalProvisioner is None:
    _Adopting = None
else:

    class _Adopting(LocalProvisioner):  # type: ignore[misc,no-redef]
        """jupyter_client's local provisioner, except that its first launch takes the
        process ``_prestart`` started (on the ports and key it was given) instead of
        starting one. Restarts launch as usual."""

        def __init__(self, prestarted: Prestarted, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self._prestarted: Prestarted | None = prestarted
            self._prestarted_file: str | None = None

        async def pre_launch(self, **kwargs: Any) -> Any:
            if self._prestarted is not None:
                self.parent.load_connection_info(self._prestarted.info)
                self.ports_cached = True  # keep the ports the kernel listens on
            return await super().pre_launch(**kwargs)

        async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> Any:
            prestarted, self._prestarted = self._prestarted, None
            if prestarted is None:
                return await super().launch_kernel(cmd, **kwargs)
            self.process = prestarted.take()
            self.pid = self.pgid = self.process.pid  # its own session
            self._prestarted_file = prestarted.connection_file
            return self.connection_info

        async def cleanup(self, restart: bool = False) -> None:
            """Also removes the prestarted kernel's connection file (jupyter_client removes
            its own copy), which a killed kernel leaves behind."""
            await super().cleanup(restart=restart)
            path, self._prestarted_file = self._prestarted_file, None
            if path is not None:
                with contextlib.suppress(OSError):
                    os.unlink(path)


def _sudo(user: str, cwd: str) -> list[str]:
    """The command prefix that runs a kernel as ``user`` in ``cwd``. sudo enters ``cwd`` as
    the user (the server may not be allowed to). The kernel is then a child of the guest,
    PID 1 of the sandbox, which ipykernel would take for "my parent has exited" and quit:
    ``JPY_PARENT_PID=1`` turns that watch off (the server stops its kernels itself)."""
    return ["sudo", "-n", "-u", user, "-H", "-D", cwd, "--", "JPY_PARENT_PID=1"]


def _raise_on_error(event: Event) -> None:
    if event["type"] == "error":
        raise KernelStartError(f"kernel setup failed: {event['name']}: {event['value']}")
