"""Docker runtime: one container per sandbox, in a user namespace of its own.

Trust: the container's contents are hostile from their first instruction. What this module
enforces (security.md §3.1 with its 2026-12-01 revision), as defaults no config can weaken:

* **Identity**: the container runs through Sandgate's OCI runtime shim (``oci_shim``), which
  puts it in a user namespace owned by, and mapping its ids to, a host uid range of its own
  (``_uids``): sandbox root is an unprivileged host uid, no two sandboxes share a uid, and
  per-user kernel counts are per sandbox. After start, the runtime reads the container's
  ``uid_map`` back and kills a container that is not in its range (fail closed if the engine's
  ``sandgate`` runtime is anything but the shim).
* **File system**: the staged overlay (``_stage``) is the root: the template idmapped and
  read-only below, a per-sandbox copy-on-write layer of ``limits.disk_mib`` on top; every mount
  ``nosuid``/``nodev``; the sandbox's host directory read-only at ``/run/sandgate``; a devpts
  instance of its own; team volumes it asked for, idmapped, at their paths. Docker's own
  container layer is never written (``read_only``).
* no network interface but loopback (``--network=none``); ports and egress go through the
  guest socket;
* ``--cap-drop=ALL`` plus ``GUEST_CAPABILITIES``, all relative to the sandbox's namespace;
  ``no-new-privileges``; Sandgate's seccomp profile; never privileged, no devices;
* pids, memory (= memory+swap; processes plus the disk, see ``memory_limit_bytes``), CPU,
  nofile and core limits; a bounded ``local`` log driver;
* the guest is the container's PID 1 (no ``--init``): nothing inside can signal or stop it,
  and it reaps orphans;
* ``--ipc=private``, ``--cgroupns=private``.

What it leaves to other layers: who may create sandboxes (the control plane), egress policy
(the gateway), runtime version floors (``floors``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import docker
import docker.errors
import requests.exceptions
from docker.types import LogConfig, Mount, Ulimit

from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes._oci_install import RUNTIME_NAME, ensure_shim
from sandgate.runtimes._rootfs import resolve_rootfs
from sandgate.runtimes._seccomp import docker_profile
from sandgate.runtimes._stage import (
    STAGE_DIR,
    Stage,
    layer_in_use,
    read_info,
    save_layer,
    stage_sandbox,
    staged,
    unstage,
)
from sandgate.runtimes._stats import CgroupFiles, SandboxStats, cgroup_files_of_pid, read_many
from sandgate.runtimes._threads import MAX_WORKERS, off_loop
from sandgate.runtimes._uids import UIDS_PER_SANDBOX, claim_slot, release_slot, uid_base
from sandgate.runtimes.base import (
    GUEST_CAPABILITIES,
    GUEST_DIR_IN_SANDBOX,
    GUEST_OOM_SCORE_ADJ,
    SHM_MB,
    RuntimeSandbox,
    RuntimeState,
    SandboxSpec,
    guest_command,
    memory_limit_bytes,
)

__all__ = ["DockerRuntime"]

T = TypeVar("T")

_LABEL_SANDBOX = "sandgate.sandbox"
_LABEL_INSTANCE = "sandgate.instance"
_STATE_FILE = "state.json"
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
        state_dir: Path,
        rootfs_dir: Path,
        base_url: str = "",
        oci_runtime: str = "runc",
    ) -> None:
        """``state_dir`` holds one small record per sandbox (its uid slot); ``rootfs_dir`` the
        template trees exported from the engine's images (shared with bwrap)."""
        self._instance_id = instance_id
        self._base_url = base_url
        self._oci_runtime = oci_runtime
        self._client: Any = None
        self._local = not base_url or base_url.startswith("unix://")
        self._state_root = state_dir
        self._rootfs_dir = rootfs_dir
        self._shim_ready = False
        #: Sandboxes between staging and their container's start: ``list`` must not take
        #: their stages for orphans.
        self._creating: set[str] = set()
        #: One set per ``list`` in progress, collecting every create that starts meanwhile:
        #: such a stage may appear after the engine's listing was taken, container and all.
        self._list_watches: list[set[str]] = []
        #: Each running sandbox's cgroup files, found once from its init's pid (``stats``).
        self._cgroup_files: dict[str, CgroupFiles] = {}

    async def ping(self) -> str:
        version: dict[str, Any] = await self._call(lambda c: c.version())
        await self._ensure_shim()
        return str(version.get("Version", "unknown"))

    async def _ensure_shim(self) -> None:
        if not self._shim_ready:
            await self._call(lambda c: ensure_shim(c, runc=self._oci_runtime, local=self._local))
            self._shim_ready = True

    async def create(self, spec: SandboxSpec) -> str:
        if not self._local:
            raise RuntimeUnavailable(
                "Docker sandboxes need the engine on this host (the sandbox's file system and "
                "user namespace are prepared here); runtime.docker.base_url names a remote one"
            )
        await self._ensure_shim()
        state_dir = self._state_root / spec.sandbox_id
        with self._in_creation(spec.sandbox_id):
            stage = await off_loop(partial(self._prepare, spec, state_dir))
            container, host = self._run_arguments(spec, stage)
            try:
                container_id, pid = await self._call(partial(_start, container, host))
                files = await off_loop(partial(self._check_identity, spec.sandbox_id, pid))
            except docker.errors.APIError as exc:
                await self.kill(spec.sandbox_id)
                raise RuntimeUnavailable(
                    f"Docker could not start the sandbox: {exc.explanation}"
                ) from None
            except BaseException:
                await self.kill(spec.sandbox_id)
                raise
        if files is not None:
            self._cgroup_files[spec.sandbox_id] = files
        return container_id

    @contextlib.contextmanager
    def _in_creation(self, sandbox_id: str) -> Iterator[None]:
        """Marks a create in flight for ``list``, which must not take its stage for an
        orphan."""
        self._creating.add(sandbox_id)
        for watch in self._list_watches:
            watch.add(sandbox_id)
        try:
            yield
        finally:
            self._creating.discard(sandbox_id)

    def _prepare(self, spec: SandboxSpec, state_dir: Path) -> Path:
        rootfs = resolve_rootfs(spec.image_ref, self._rootfs_dir, self._base_url, spec.image_id)
        self._state_root.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            state_dir.mkdir(mode=0o700)
        except FileExistsError:
            raise RuntimeUnavailable(f"docker sandbox {spec.sandbox_id} already exists") from None
        try:
            slot = claim_slot(state_dir)
            _write_state(state_dir, {"slot": slot})
            base = uid_base(slot)
            stage = stage_sandbox(
                spec.sandbox_id,
                base=base,
                tree=rootfs.path,
                host_dir=spec.host_dir,
                disk_mib=spec.disk_mib,
                max_ptys=spec.max_ptys,
                seeds=spec.seeds,
                info={"instance": self._instance_id, "runtime": "docker", "slot": slot},
                userns=True,
                volumes=[volume.source for volume in spec.volumes],
                layer=spec.layer,
                guest=spec.guest,
            )
        except BaseException:
            self._cleanup(spec.sandbox_id)
            raise
        return stage.path

    def _check_identity(self, sandbox_id: str, pid: int | None) -> CgroupFiles | None:
        """SECURITY: the container must run in the sandbox's own uid range (the engine's
        ``sandgate`` runtime really is the shim); otherwise it is killed by the caller.

        Returns the container's cgroup files, found from the same pid, so ``stats`` need not
        ask the engine for it again."""
        base = read_info(sandbox_id).get("uid_base")
        expected = f"0 {base} {UIDS_PER_SANDBOX}"
        try:
            found = " ".join(Path(f"/proc/{pid}/uid_map").read_text().split()) if pid else ""
        except OSError:
            found = ""
        if found != expected:
            raise RuntimeUnavailable(
                f"the sandbox is not in its own user namespace (uid_map {found!r}); the Docker "
                f"engine's '{RUNTIME_NAME}' runtime must be Sandgate's shim (`sandgate doctor`)"
            )
        return cgroup_files_of_pid(pid) if pid else None

    async def kill(self, sandbox_id: str) -> None:
        def remove(client: Any) -> None:
            try:
                client.api.remove_container(_name(sandbox_id), force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if "already in progress" not in str(exc):
                    raise

        self._cgroup_files.pop(sandbox_id, None)
        await self._call(remove)
        await off_loop(partial(self._cleanup, sandbox_id))

    def _cleanup(self, sandbox_id: str) -> None:
        state_dir = self._state_root / sandbox_id
        unstage(sandbox_id)
        slot = _load_state(state_dir).get("slot")
        if isinstance(slot, int):
            release_slot(slot, state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)

    async def pause(self, sandbox_id: str) -> None:
        """``docker pause``: the cgroup freezer stops every process; memory stays."""
        await self._call(lambda c: c.api.pause(_name(sandbox_id)))

    async def resume(self, sandbox_id: str) -> None:
        await self._call(lambda c: c.api.unpause(_name(sandbox_id)))

    async def layer_in_use(self, sandbox_id: str) -> int:
        return await _on_host(partial(layer_in_use, sandbox_id))

    async def save_layer(self, sandbox_id: str, archive: Path) -> int:
        """The staged layer is on this host whatever the engine does (``_stage``)."""
        return (await _on_host(partial(save_layer, sandbox_id, archive))).size_bytes

    async def list(self) -> list[RuntimeSandbox]:
        def listing(client: Any) -> list[dict[str, Any]]:
            filters = {"label": [f"{_LABEL_INSTANCE}={self._instance_id}"]}
            result: list[dict[str, Any]] = client.api.containers(all=True, filters=filters)
            return result

        # A stage is an orphan only if no create was in flight for it at any moment of this
        # call: the ones in flight now (taken before the listing, so a create that ends
        # meanwhile has its container listed) and every one that starts until the end.
        creating = set(self._creating)
        started: set[str] = set()
        self._list_watches.append(started)
        try:
            found = []
            for row in await self._call(listing):
                state = {"running": RuntimeState.RUNNING, "paused": RuntimeState.PAUSED}.get(
                    row.get("State", ""), RuntimeState.GONE
                )
                labels = row.get("Labels") or {}
                found.append(RuntimeSandbox(labels.get(_LABEL_SANDBOX, ""), row["Id"], state))
            # Stages (and uid slots) of this instance whose containers went away while we were
            # down.
            known = {sandbox.sandbox_id for sandbox in found} | creating
            for sandbox_id in list(staged()):
                info = read_info(sandbox_id)
                mine = info.get("instance") == self._instance_id and info.get("runtime") == "docker"
                if mine and sandbox_id not in known and sandbox_id not in started:
                    await off_loop(partial(self._cleanup, sandbox_id))
        finally:
            self._list_watches.remove(started)
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

    async def guest_log(self, sandbox_id: str, limit: int = 4096) -> str:
        def read(client: Any) -> str:
            try:
                data = client.api.logs(_name(sandbox_id), stdout=True, stderr=True, tail=50)
            except docker.errors.NotFound:
                return ""
            return bytes(data)[-limit:].decode("utf-8", "replace")

        return await self._call(read)

    async def stats(self, sandbox_ids: Sequence[str]) -> dict[str, SandboxStats]:
        """Reads each container's cgroup directly; the engine is asked only once per sandbox,
        for the pid that leads to its cgroup."""
        for sandbox_id in sandbox_ids:
            if sandbox_id not in self._cgroup_files:
                pid = await self.pid(sandbox_id)
                files = await off_loop(partial(cgroup_files_of_pid, pid)) if pid else None
                if files is not None:
                    self._cgroup_files[sandbox_id] = files
        wanted = {
            sandbox_id: (self._cgroup_files[sandbox_id], Stage(STAGE_DIR / sandbox_id).disk)
            for sandbox_id in sandbox_ids
            if sandbox_id in self._cgroup_files
        }
        found = await off_loop(partial(read_many, wanted))
        for sandbox_id in wanted.keys() - found.keys():
            self._cgroup_files.pop(sandbox_id, None)  # gone, or its files moved: find again
        return found

    async def inspect(self, sandbox_id: str) -> dict[str, Any]:
        """The engine's raw view of a sandbox (posture tests and ``doctor`` read it)."""
        result: dict[str, Any] = await self._call(
            lambda c: c.api.inspect_container(_name(sandbox_id))
        )
        result["SandgateStage"] = read_info(sandbox_id)
        return result

    def _run_arguments(
        self, spec: SandboxSpec, stage: Path
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The container's own settings (``create_container``) and its host config
        (``create_host_config``), apart: the engine is called directly (``_start``)."""
        container = {
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
            "user": "0:0",
            "stop_signal": "SIGKILL",
            "environment": {"LANG": "C.UTF-8"},
        }
        host = {
            "init": False,
            "cap_drop": ["ALL"],
            "cap_add": list(GUEST_CAPABILITIES),
            "security_opt": ["no-new-privileges:true", f"seccomp={docker_profile()}"],
            "privileged": False,
            # Docker's own layer stays untouched: the shim gives the container the staged root.
            "read_only": True,
            "mounts": [
                Mount(GUEST_DIR_IN_SANDBOX, str(stage / "run"), type="bind", read_only=True),
                Mount("/dev/pts", str(stage / "pts"), type="bind"),
                *(
                    Mount(volume.target, str(Stage(stage).volume(index)), type="bind")
                    for index, volume in enumerate(spec.volumes)
                ),
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
            "runtime": RUNTIME_NAME,
        }
        return container, host

    async def _call(self, func: Callable[[Any], T]) -> T:
        try:
            return await off_loop(partial(self._invoke, func))
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
                docker.DockerClient(base_url=self._base_url, timeout=60, max_pool_size=MAX_WORKERS)
                if self._base_url
                else docker.from_env(timeout=60, max_pool_size=MAX_WORKERS)
            )
        return func(self._client)


def _start(container: dict[str, Any], host: dict[str, Any], client: Any) -> tuple[str, int | None]:
    """Creates and starts the container; returns its id and its init's host pid.

    Three calls to the engine where ``containers.run`` (create, inspect, start) and a look-up
    of the pid made four: each costs the engine's CPU and the gateway's, and a burst of creates
    pays for all of them at once."""
    api = client.api
    created = api.create_container(host_config=api.create_host_config(**host), **container)
    container_id = str(created["Id"])
    api.start(container_id)
    pid = int(api.inspect_container(container_id)["State"].get("Pid") or 0)
    return container_id, pid or None


async def _on_host(func: Callable[[], T]) -> T:
    try:
        return await off_loop(func)
    except OSError as exc:
        raise RuntimeUnavailable(f"docker runtime: {exc}") from None


def _name(sandbox_id: str) -> str:
    return f"sandgate-{sandbox_id}"


def _write_state(state_dir: Path, state: dict[str, Any]) -> None:
    temp = state_dir / f".{_STATE_FILE}.tmp"
    temp.write_text(json.dumps(state))
    temp.rename(state_dir / _STATE_FILE)


def _load_state(state_dir: Path) -> dict[str, Any]:
    with contextlib.suppress(OSError, ValueError):
        data = json.loads((state_dir / _STATE_FILE).read_text())
        if isinstance(data, dict):
            return data
    return {}
