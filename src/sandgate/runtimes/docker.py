"""Docker runtime: one hardened container per sandbox.

Trust: the container's contents are hostile from their first instruction. What this module
enforces (security.md §3.1), as defaults that a config cannot weaken:

* no network interface but loopback (``--network=none``); ports and egress go through the
  guest socket;
* ``--cap-drop=ALL`` plus only what the guest needs to act *as the sandbox's users*:
  ``SETUID``/``SETGID`` (switch to the selected user), ``CHOWN``/``FOWNER``/``DAC_OVERRIDE``/
  ``FSETID`` (root's own file operations when a caller asks for ``user="root"``) and ``KILL``
  (signal processes of other users). Processes of the default user run with no capabilities;
* ``no-new-privileges``, Docker's default seccomp profile, never privileged, no devices;
* read-only root file system; ``/tmp`` and the user's home are bounded tmpfs mounts;
* pids, memory (= memory+swap; processes plus the in-memory file systems, see
  ``memory_limit_bytes``), CPU, nofile and core limits; a bounded ``local`` log driver;
* ``--init`` reaps zombies; ``--ipc=private``, ``--cgroupns=private``;
* the only host mount is the sandbox's own directory (guest socket, guest code, its config).

What it leaves to other layers: who may create sandboxes (the control plane), egress policy
(the gateway), user namespaces (enable ``userns-remap`` on the daemon; ``sandgate doctor``
reports it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions
from docker.types import LogConfig, Mount, Ulimit

from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes._devpts import mount_devpts, unmount_devpts
from sandgate.runtimes._seccomp import docker_profile
from sandgate.runtimes.base import (
    GUEST_DIR_IN_SANDBOX,
    GUEST_OOM_SCORE_ADJ,
    ROOT_HOME_MB,
    SHM_MB,
    RuntimeSandbox,
    RuntimeState,
    SandboxSpec,
    guest_command,
    inode_limit,
    memory_limit_bytes,
)

__all__ = ["GUEST_CAPABILITIES", "DockerRuntime"]

T = TypeVar("T")

#: SECURITY: the complete capability set of a sandbox; see the module docstring for each.
GUEST_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID")

_LABEL_SANDBOX = "sandgate.sandbox"
_LABEL_INSTANCE = "sandgate.instance"
_UNREACHABLE = (
    "Docker engine unreachable ({error}). Start it (`dockerd &` or `systemctl start docker`) "
    "or set runtime.kind=bwrap"
)


class DockerRuntime:
    """Runs sandboxes as containers on one Docker engine."""

    name = "docker"

    def __init__(
        self,
        instance_id: str,
        *,
        base_url: str = "",
        oci_runtime: str = "runc",
        state_dir: Path | None = None,
    ) -> None:
        """``state_dir`` holds each sandbox's devpts mount (``<state_dir>/pts/<id>``); without
        one, or with a remote engine, sandboxes share the engine's default PTY pool."""
        self._instance_id = instance_id
        self._base_url = base_url
        self._oci_runtime = oci_runtime
        self._client: Any = None
        local = not base_url or base_url.startswith("unix://")
        self._pts_root = state_dir / "pts" if state_dir is not None and local else None

    async def ping(self) -> str:
        version: dict[str, Any] = await self._call(lambda c: c.version())
        return str(version.get("Version", "unknown"))

    async def create(self, spec: SandboxSpec) -> str:
        kwargs = self._run_arguments(spec)
        if self._pts_root is not None:
            pts = self._pts_root / spec.sandbox_id
            await asyncio.to_thread(mount_devpts, pts, spec.max_ptys)
            kwargs["mounts"].append(Mount("/dev/pts", str(pts), type="bind"))
        try:
            container = await self._call(lambda c: c.containers.run(**kwargs))
        except docker.errors.APIError as exc:
            await self.kill(spec.sandbox_id)
            raise RuntimeUnavailable(
                f"Docker could not start the sandbox: {exc.explanation}"
            ) from None
        except BaseException:
            if self._pts_root is not None:
                await asyncio.to_thread(unmount_devpts, self._pts_root / spec.sandbox_id)
            raise
        return str(container.id)

    async def kill(self, sandbox_id: str) -> None:
        def remove(client: Any) -> None:
            try:
                client.api.remove_container(_name(sandbox_id), force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if "already in progress" not in str(exc):
                    raise

        await self._call(remove)
        if self._pts_root is not None:
            await asyncio.to_thread(unmount_devpts, self._pts_root / sandbox_id)

    async def pause(self, sandbox_id: str) -> None:
        """``docker pause``: the cgroup freezer stops every process; memory stays."""
        await self._call(lambda c: c.api.pause(_name(sandbox_id)))

    async def resume(self, sandbox_id: str) -> None:
        await self._call(lambda c: c.api.unpause(_name(sandbox_id)))

    async def list(self) -> list[RuntimeSandbox]:
        def listing(client: Any) -> list[dict[str, Any]]:
            filters = {"label": [f"{_LABEL_INSTANCE}={self._instance_id}"]}
            result: list[dict[str, Any]] = client.api.containers(all=True, filters=filters)
            return result

        found = []
        for row in await self._call(listing):
            state = {"running": RuntimeState.RUNNING, "paused": RuntimeState.PAUSED}.get(
                row.get("State", ""), RuntimeState.GONE
            )
            labels = row.get("Labels") or {}
            found.append(RuntimeSandbox(labels.get(_LABEL_SANDBOX, ""), row["Id"], state))
        if self._pts_root is not None and self._pts_root.is_dir():
            # devpts mounts of sandboxes whose containers went away while we were down.
            known = {sandbox.sandbox_id for sandbox in found}
            for path in self._pts_root.iterdir():
                if path.name not in known:
                    await asyncio.to_thread(unmount_devpts, path)
        return found

    async def pid(self, sandbox_id: str) -> int | None:
        def inspect(client: Any) -> int | None:
            try:
                data = client.api.inspect_container(_name(sandbox_id))
            except docker.errors.NotFound:
                return None
            pid = int(data["State"].get("Pid") or 0)
            return pid or None

        return await self._call(inspect)

    async def inspect(self, sandbox_id: str) -> dict[str, Any]:
        """The engine's raw view of a sandbox (posture tests and ``doctor`` read it)."""
        result: dict[str, Any] = await self._call(
            lambda c: c.api.inspect_container(_name(sandbox_id))
        )
        return result

    def _run_arguments(self, spec: SandboxSpec) -> dict[str, Any]:
        tmpfs_opts = "rw,nosuid,nodev"
        return {
            "image": spec.image_ref,
            "command": guest_command(),
            "name": _name(spec.sandbox_id),
            "hostname": "sandbox",
            "labels": {
                **spec.labels,
                _LABEL_SANDBOX: spec.sandbox_id,
                _LABEL_INSTANCE: self._instance_id,
            },
            "detach": True,
            "init": True,
            "user": "0:0",
            "cap_drop": ["ALL"],
            "cap_add": list(GUEST_CAPABILITIES),
            "security_opt": ["no-new-privileges:true", f"seccomp={docker_profile()}"],
            "privileged": False,
            "read_only": True,
            "tmpfs": {
                "/tmp": (
                    f"{tmpfs_opts},noexec,size={spec.tmp_size_mb}m,"
                    f"nr_inodes={inode_limit(spec.tmp_size_mb)}"
                ),
                spec.home_dir: (
                    f"{tmpfs_opts},size={spec.disk_size_mb}m,mode=0755,"
                    f"nr_inodes={inode_limit(spec.disk_size_mb)},"
                    f"uid={spec.home_uid},gid={spec.home_uid}"
                ),
                "/root": f"{tmpfs_opts},size={ROOT_HOME_MB}m,mode=0700",
                "/run/user": f"{tmpfs_opts},size=1m,mode=0755",
            },
            "mounts": [
                Mount(GUEST_DIR_IN_SANDBOX, str(spec.host_dir), type="bind", read_only=False)
            ],
            "network_mode": "none",
            "ipc_mode": "private",
            "cgroupns": "private",
            "pids_limit": spec.pids_limit,
            "mem_limit": memory_limit_bytes(spec),
            "memswap_limit": memory_limit_bytes(spec),
            "nano_cpus": spec.cpu_count * 1_000_000_000,
            "shm_size": f"{SHM_MB}m",
            "ulimits": [
                Ulimit(name="nofile", soft=spec.nofile, hard=spec.nofile),
                Ulimit(name="core", soft=0, hard=0),
            ],
            "log_config": LogConfig(
                type="local", config={"max-size": "1m", "max-file": "1", "compress": "false"}
            ),
            "oom_score_adj": GUEST_OOM_SCORE_ADJ,
            "restart_policy": {"Name": "no"},
            "stop_signal": "SIGKILL",
            "runtime": self._oci_runtime,
            "environment": {"LANG": "C.UTF-8"},
        }

    async def _call(self, func: Callable[[Any], T]) -> T:
        try:
            return await asyncio.to_thread(partial(self._invoke, func))
        except docker.errors.DockerException as exc:
            if isinstance(exc, docker.errors.APIError):
                raise
            raise RuntimeUnavailable(_UNREACHABLE.format(error=exc)) from None
        except requests.exceptions.ConnectionError as exc:
            self._client = None
            raise RuntimeUnavailable(_UNREACHABLE.format(error=type(exc).__name__)) from None

    def _invoke(self, func: Callable[[Any], T]) -> T:
        if self._client is None:
            self._client = (
                docker.DockerClient(base_url=self._base_url, timeout=60)
                if self._base_url
                else docker.from_env(timeout=60)
            )
        return func(self._client)


def _name(sandbox_id: str) -> str:
    return f"sandgate-{sandbox_id}"
