"""bwrap runtime: daemonless sandboxes on bubblewrap, seccomp and cgroups (security.md §3.2).

Trust: the sandbox's contents are hostile from their first instruction; the gateway (running
as root) is trusted. What this module enforces, as defaults no config can weaken:

* **Namespaces**: new user, mount, pid, ipc, uts, net and cgroup namespaces; the network
  namespace holds only ``lo``.
* **A distinct host uid range per sandbox**: the user namespace maps sandbox ids 0..65535 to
  host ``UID_BASE + slot * 65536`` onwards. bubblewrap runs *as* the range's first uid (so it
  has no host privilege), blocks on ``--userns-block-fd`` while this module, as root, writes
  the multi-id ``uid_map``/``gid_map`` (plain ``bwrap --uid`` maps one id; the guest must switch
  between root and ``user``). Root in a sandbox is therefore an unprivileged host uid, and two
  sandboxes never share a uid (MT-06, per-uid kernel limits).
* **No nested user namespaces**: before bubblewrap continues, this module sets
  ``user.max_user_namespaces=0`` *inside* the sandbox's user namespace (from a helper that
  joins it), which nothing inside can raise (no ``CAP_SYS_RESOURCE``, ``/proc/sys`` read-only);
  ``--assert-userns-disabled`` makes bubblewrap verify it, and the seccomp filter also refuses
  ``unshare``/``setns``/``clone(CLONE_NEW*)``. bubblewrap's own ``--disable-userns`` is not used:
  it nests a second user namespace that maps a single id.
* **Capabilities**: ``--cap-drop ALL`` plus the guest's set (``GUEST_CAPABILITIES``, the same as
  Docker's, all relative to the sandbox's user namespace); bubblewrap's PID 1 holds none;
  processes of the default user hold none (setuid away from root clears them).
* **no_new_privs** and a **seccomp** filter from ``profiles/bwrap-seccomp.json`` (libseccomp),
  installed by bubblewrap in PID 1 and the guest; foreign-arch/x32 calls kill.
* **Cgroup** per sandbox (v1 or v2): memory = memory+swap, pids, CPU; the freezer for pause;
  kill = every process of the cgroup (RES-10). rlimits: nofile, core=0, fsize (the disk size),
  ``oom_score_adj=1000``.
* **File system**: the template's root file system read-only (all bubblewrap mounts are
  ``nosuid``, devices only in the minimal ``--dev``); bounded tmpfs for ``/tmp``, ``/dev/shm``,
  the user's home, ``/root``; the only host directory is the sandbox's own, at
  ``/run/sandgate``; bind sources are opened by root and passed as file descriptors.
* ``--new-session`` (no controlling terminal; TIOCSTI also filtered), ``--clearenv``.

Deliberate difference from the reference invocation: no ``--die-with-parent``. Sandboxes must
survive a gateway crash or restart (design §2), so bubblewrap runs in its own session, not as
the gateway's child; the state under ``$SANDGATE_HOME/bwrap/<id>/`` lets :meth:`list` find
them again, and the service kills those nobody wants.

Left to other layers: who may create sandboxes (the control plane), egress (the gateway),
disk quotas beyond tmpfs sizes, Landlock (not used). The gateway must run as root; rootless
operation (``newuidmap`` + delegated cgroups) is not supported.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import ctypes
import json
import os
import re
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes._cgroups import (
    CgroupHost,
    CgroupLimits,
    SandboxCgroup,
    detect,
    missing_message,
)
from sandgate.runtimes._devpts import TTY_GID
from sandgate.runtimes._rootfs import resolve_rootfs
from sandgate.runtimes._seccomp import compile_profile
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
from sandgate.runtimes.docker import GUEST_CAPABILITIES

__all__ = [
    "BWRAP_MIN_VERSION",
    "UIDS_PER_SANDBOX",
    "UID_BASE",
    "BwrapRuntime",
    "Requirement",
    "check_host",
]

T = TypeVar("T")

#: First host uid given to sandboxes; slot ``n`` owns ``UID_BASE + n * UIDS_PER_SANDBOX`` onwards.
UID_BASE = 1_000_000_000
UIDS_PER_SANDBOX = 65536
_MAX_SLOTS = 16384  # keeps every mapped id below 2**31
#: Host-wide claims on uid slots (one file per live sandbox, of any Sandgate instance).
_RUN_DIR = Path("/run/sandgate-bwrap")
_CLAIMS_DIR = _RUN_DIR / "uids"
#: Per-sandbox bind mounts of its root file system and host directory, in a directory only the
#: sandbox's root uid can enter: bubblewrap resolves bind sources as that uid, and the gateway's
#: home (e.g. ``/root/.sandgate``) is not searchable by it.
_STAGE_DIR = _RUN_DIR / "stage"
#: A uid below every slot, used only to probe whether unprivileged user namespaces work.
_PROBE_UID = UID_BASE - 1
BWRAP_MIN_VERSION = (0, 8, 0)
_INFO_TIMEOUT_S = 10.0
_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox\n"
_STATE_FILE = "state.json"
_UTIL_LINUX = ("setpriv", "setsid", "nsenter", "prlimit")


@dataclass(frozen=True)
class Requirement:
    """One isolation feature the bwrap runtime needs, whether this host has it, and the fix."""

    feature: str
    ok: bool
    detail: str
    fix: str = ""


def check_host() -> list[Requirement]:
    """Probes every feature the bwrap runtime requires (a few ms; runs ``bwrap`` once)."""
    found: list[Requirement] = []
    bwrap = shutil.which("bwrap")
    version = _bwrap_version(bwrap) if bwrap else None
    if bwrap is None or version is None:
        found.append(
            Requirement("bubblewrap", False, "not installed", "apt-get install bubblewrap")
        )
    else:
        text = ".".join(map(str, version))
        ok = version >= BWRAP_MIN_VERSION
        need = ".".join(map(str, BWRAP_MIN_VERSION))
        found.append(
            Requirement(
                "bubblewrap",
                ok,
                f"{bwrap} {text}",
                "" if ok else f"install bubblewrap >= {need} (--assert-userns-disabled)",
            )
        )
    root = os.geteuid() == 0
    found.append(
        Requirement(
            "root",
            root,
            "running as root" if root else f"running as uid {os.geteuid()}",
            ""
            if root
            else "run `sandgate serve` as root: the runtime writes uid maps and "
            "cgroups (rootless operation is not supported)",
        )
    )
    tools = [t for t in _UTIL_LINUX if shutil.which(t) is None]
    found.append(
        Requirement(
            "util-linux",
            not tools,
            ", ".join(_UTIL_LINUX) if not tools else f"missing: {', '.join(tools)}",
            "" if not tools else "apt-get install util-linux",
        )
    )
    if bwrap is not None and root and not tools:
        found.append(_check_userns(bwrap))
    found.append(_check_seccomp())
    host = detect()
    found.append(
        Requirement(
            f"cgroup v{host.version} controllers",
            not host.missing,
            ", ".join(sorted(host.mounts)),
            missing_message(host) if host.missing else "",
        )
    )
    return found


def _bwrap_version(bwrap: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except OSError:
        return None
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(p) for p in match.groups()) if match else None


def _check_userns(bwrap: str) -> Requirement:
    try:
        proc = subprocess.run(
            [bwrap, "--unshare-user", "--ro-bind", "/", "/", "--", "/bin/true"],
            user=_PROBE_UID,
            group=_PROBE_UID,
            extra_groups=[],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            cwd="/",
        )
        ok, why = proc.returncode == 0, proc.stderr.strip()
    except OSError as exc:
        ok, why = False, str(exc)
    if ok:
        return Requirement("user namespaces", True, "unprivileged uids can create them")
    fix = "allow unprivileged user namespaces"
    if _sysctl("kernel/apparmor_restrict_unprivileged_userns") == "1":
        fix = (
            "Ubuntu restricts them with AppArmor: add a profile for /usr/bin/bwrap with "
            "`userns,` (see docs/operations.md), or `sysctl -w "
            "kernel.apparmor_restrict_unprivileged_userns=0`"
        )
    elif _sysctl("kernel/unprivileged_userns_clone") == "0":
        fix = "sysctl -w kernel.unprivileged_userns_clone=1"
    elif _sysctl("user/max_user_namespaces") == "0":
        fix = "sysctl -w user.max_user_namespaces=15000"
    return Requirement("user namespaces", False, f"blocked ({why[:200]})", fix)


def _check_seccomp() -> Requirement:
    status = Path("/proc/self/status").read_text()
    if "Seccomp:" not in status:
        return Requirement(
            "seccomp", False, "the kernel has no seccomp", "use a kernel with CONFIG_SECCOMP"
        )
    try:
        size = len(compile_profile()) // 8
    except RuntimeUnavailable as exc:
        return Requirement("seccomp", False, exc.message, "apt-get install libseccomp2")
    return Requirement("seccomp", True, f"filter of {size} instructions (libseccomp)")


def _sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", name).read_text().strip()
    except OSError:
        return None


class BwrapRuntime:
    """Runs sandboxes with bubblewrap; state lives under ``<home>/bwrap/<sandbox id>/``."""

    name = "bwrap"

    def __init__(
        self,
        instance_id: str,
        *,
        home: Path,
        rootfs_dir: Path | None = None,
        docker_base_url: str = "",
    ) -> None:
        self._instance_id = instance_id
        self._state_root = home / "bwrap"
        self._rootfs_dir = rootfs_dir or home / "rootfs"
        self._docker_base_url = docker_base_url
        self._cgroups: CgroupHost | None = None
        self._checked: str | None = None

    # -- protocol -------------------------------------------------------------------------

    async def ping(self) -> str:
        return await asyncio.to_thread(self._ensure_host)

    async def create(self, spec: SandboxSpec) -> str:
        return await self._run(partial(self._create, spec))

    async def kill(self, sandbox_id: str) -> None:
        await self._run(partial(self._kill, sandbox_id))

    async def pause(self, sandbox_id: str) -> None:
        """Freezes the sandbox's cgroup: every process stops, memory stays."""
        await self._run(lambda: self._live_cgroup(sandbox_id).freeze())

    async def resume(self, sandbox_id: str) -> None:
        await self._run(lambda: self._live_cgroup(sandbox_id).thaw())

    async def list(self) -> builtins.list[RuntimeSandbox]:
        return await self._run(self._list)

    async def pid(self, sandbox_id: str) -> int | None:
        return await self._run(partial(self._pid, sandbox_id))

    async def inspect(self, sandbox_id: str) -> dict[str, Any]:
        """The recorded state of a sandbox (posture tests and ``doctor`` read it)."""
        return await self._run(partial(self._read_state, sandbox_id))

    # -- host checks ----------------------------------------------------------------------

    def _ensure_host(self) -> str:
        """Checks the host once; raises ``RuntimeUnavailable`` naming what is missing."""
        if self._checked is None:
            failing = [r for r in check_host() if not r.ok]
            if failing:
                raise RuntimeUnavailable(unavailable_message(failing))
            self._cgroups = detect()
            version = _bwrap_version(shutil.which("bwrap") or "bwrap") or (0,)
            self._checked = "bubblewrap " + ".".join(map(str, version))
        return self._checked

    @property
    def _cgroup_host(self) -> CgroupHost:
        if self._cgroups is None:
            self._cgroups = detect()
        return self._cgroups

    # -- create ---------------------------------------------------------------------------

    def _create(self, spec: SandboxSpec) -> str:
        self._ensure_host()
        rootfs = resolve_rootfs(spec.image_ref, self._rootfs_dir, self._docker_base_url)
        state_dir = self._state_root / spec.sandbox_id
        self._state_root.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            state_dir.mkdir(mode=0o700)
        except FileExistsError:
            raise RuntimeUnavailable(f"bwrap sandbox {spec.sandbox_id} already exists") from None
        try:
            return self._start(spec, rootfs.path, rootfs.env, rootfs.workdir, state_dir)
        except BaseException:
            with contextlib.suppress(Exception):
                self._kill(spec.sandbox_id)
            raise

    def _start(
        self,
        spec: SandboxSpec,
        rootfs: Path,
        image_env: dict[str, str],
        workdir: str,
        state_dir: Path,
    ) -> str:
        slot = _claim_slot(state_dir)
        base = UID_BASE + slot * UIDS_PER_SANDBOX
        cgroup = SandboxCgroup(self._cgroup_host, spec.sandbox_id)
        state: dict[str, Any] = {
            "sandbox_id": spec.sandbox_id,
            "instance": self._instance_id,
            "slot": slot,
            "uid_base": base,
            "cgroup": [str(p) for p in cgroup.paths],
            "cgroup_version": self._cgroup_host.version,
            "rootfs": str(rootfs),
            "host_dir": str(spec.host_dir),
        }
        _write_state(state_dir, state)
        cgroup.create(
            CgroupLimits(
                memory_bytes=memory_limit_bytes(spec),
                pids=spec.pids_limit,
                cpus=spec.cpu_count,
            )
        )
        # SECURITY: the sandbox's root (host uid ``base``) owns its own directory, so the guest
        # can create its socket there; nothing else on the host is given to that uid.
        os.chown(spec.host_dir, base, base)
        stage = _stage(spec, base, rootfs)
        run_dir = Path("/run/user") / str(base)
        run_dir.parent.mkdir(exist_ok=True, mode=0o755)
        with contextlib.suppress(FileExistsError):
            run_dir.mkdir(mode=0o700)
        os.chown(run_dir, base, base)

        fds: list[int] = []
        try:
            info_r, info_w = os.pipe()
            block_r, block_w = os.pipe()
            fds += [info_r, info_w, block_r, block_w]
            seccomp_fd = _memfd("seccomp", compile_profile())
            fds.append(seccomp_fd)
            hosts_fd = _memfd("hosts", _HOSTS.encode())
            fds.append(hosts_fd)
            hostname_fd = _memfd("hostname", b"sandbox\n")
            fds.append(hostname_fd)
            env = {**image_env, "LANG": "C.UTF-8", "HOME": "/root", "HOSTNAME": "sandbox"}
            argv = self._argv(
                spec,
                rootfs,
                env,
                workdir,
                info_w=info_w,
                block_r=block_r,
                stage=stage,
                seccomp_fd=seccomp_fd,
                hosts_fd=hosts_fd,
                hostname_fd=hostname_fd,
            )
            log_fd = os.open(state_dir / "guest.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            fds.append(log_fd)
            disk = spec.disk_size_mb * 1024 * 1024
            # rlimits are set by the launched process on itself (lowering needs no privilege)
            # and inherited by everything in the sandbox.
            limits = [
                shutil.which("prlimit") or "prlimit",
                f"--nofile={spec.nofile}:{spec.nofile}",
                "--core=0:0",
                f"--fsize={disk}:{disk}",
                "--",
            ]
            # SECURITY: ``setpriv`` drops to the range's first uid/gid with no supplementary
            # groups (real, effective and saved ids; root's capabilities go with uid 0) before
            # anything else runs, exactly what ``Popen(user=, group=, extra_groups=[])`` did;
            # doing it in the child instead lets Popen use vfork, not a fork of the gateway.
            drop = [
                shutil.which("setpriv") or "setpriv",
                f"--reuid={base}",
                f"--regid={base}",
                "--clear-groups",
                "--",
            ]
            launcher = subprocess.Popen(
                [*drop, shutil.which("setsid") or "setsid", "--fork", *limits, *argv],
                pass_fds=(info_w, block_r, seccomp_fd, hosts_fd, hostname_fd),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log_fd,
                cwd="/",
                env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
            )
            # The first cgroup move after a quiet spell waits out an RCU grace period (10-25 ms
            # on this cgroup v1 VM); moving the launcher now pays it while bubblewrap starts,
            # and the moves of bubblewrap's processes below come cheap. The launcher may already
            # be gone or have forked: those moves below are the ones that count.
            with contextlib.suppress(OSError):
                cgroup.add(launcher.pid)
            launcher.wait()
            for fd in (info_w, block_r):
                os.close(fd)
                fds.remove(fd)
            child = _read_child_pid(info_r, state_dir / "guest.log")
            monitor = _parent_pid(child)
            state.update(
                init_pid=child,
                init_start=_start_time(child),
                monitor_pid=monitor,
                monitor_start=_start_time(monitor),
                ref=_ref(spec),
            )
            _write_state(state_dir, state)
            # bubblewrap waits on block_r; nothing in the sandbox has run yet.
            mapping = f"0 {base} {UIDS_PER_SANDBOX}\n"
            Path(f"/proc/{child}/uid_map").write_text(mapping)
            Path(f"/proc/{child}/gid_map").write_text(mapping)
            with _NestedUsernsLock(child):  # the helper runs while the processes are moved
                for pid in (monitor, child):
                    cgroup.add(pid)
            for pid in (monitor, child):
                Path(f"/proc/{pid}/oom_score_adj").write_text(str(GUEST_OOM_SCORE_ADJ))
            state["started"] = True
            _write_state(state_dir, state)
            os.write(block_w, b"1")
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        return _ref(spec)

    def _argv(
        self,
        spec: SandboxSpec,
        rootfs: Path,
        env: dict[str, str],
        workdir: str,
        *,
        info_w: int,
        block_r: int,
        stage: Path,
        seccomp_fd: int,
        hosts_fd: int,
        hostname_fd: int,
    ) -> builtins.list[str]:
        mib = 1024 * 1024
        argv = [
            shutil.which("bwrap") or "bwrap",
            "--unshare-all",
            "--unshare-user",
            "--userns-block-fd", str(block_r),
            "--info-fd", str(info_w),
            "--assert-userns-disabled",
            "--new-session",
            "--cap-drop", "ALL",
        ]  # fmt: skip
        for cap in GUEST_CAPABILITIES:
            argv += ["--cap-add", f"CAP_{cap}"]
        argv += ["--clearenv"]
        for key, value in sorted(env.items()):
            argv += ["--setenv", key, value]
        argv += [
            "--hostname", "sandbox",
            "--ro-bind", str(stage / "root"), "/",
            "--proc", "/proc",
            "--dev", "/dev",
            "--dev-bind", str(stage / "pts"), "/dev/pts",
            "--bind", str(stage / "tmp"), "/tmp",
            "--size", str(SHM_MB * mib), "--perms", "1777", "--tmpfs", "/dev/shm",
            "--bind", str(stage / "home"), spec.home_dir,
            "--size", str(ROOT_HOME_MB * mib), "--perms", "0700", "--tmpfs", "/root",
        ]  # fmt: skip
        if (rootfs / "run" / "user").is_dir():
            argv += ["--size", str(mib), "--perms", "0755", "--tmpfs", "/run/user"]
        argv += ["--bind", str(stage / "run"), GUEST_DIR_IN_SANDBOX]
        argv += ["--perms", "0644", "--ro-bind-data", str(hosts_fd), "/etc/hosts"]
        if (rootfs / "etc" / "hostname").is_file():
            argv += ["--perms", "0644", "--ro-bind-data", str(hostname_fd), "/etc/hostname"]
        chdir = workdir if (rootfs / workdir.lstrip("/")).is_dir() else "/"
        argv += ["--chdir", chdir, "--seccomp", str(seccomp_fd), "--"]
        argv += guest_command()
        return argv

    # -- kill, pause, list ----------------------------------------------------------------

    def _kill(self, sandbox_id: str) -> None:
        state_dir = self._state_root / sandbox_id
        state = _load_state(state_dir)
        # The sandbox's PID 1 first: the kernel then kills its whole pid namespace. Then
        # everything in its cgroup (bubblewrap's monitor, anything not yet moved in).
        for role in ("init", "monitor"):
            pid, start = state.get(f"{role}_pid"), state.get(f"{role}_start")
            if isinstance(pid, int) and _alive(pid, start):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        cgroup = SandboxCgroup(self._cgroup_host, sandbox_id)
        cgroup.kill_all()
        cgroup.remove()
        slot = state.get("slot")
        if isinstance(slot, int):
            shutil.rmtree(Path("/run/user") / str(UID_BASE + slot * UIDS_PER_SANDBOX), True)
            _release_slot(slot, state_dir)
        _unstage(sandbox_id)
        shutil.rmtree(state_dir, ignore_errors=True)

    def _live_cgroup(self, sandbox_id: str) -> SandboxCgroup:
        if self._pid(sandbox_id) is None:
            raise RuntimeUnavailable(f"bwrap sandbox {sandbox_id} is not running")
        return SandboxCgroup(self._cgroup_host, sandbox_id)

    def _list(self) -> builtins.list[RuntimeSandbox]:
        found: builtins.list[RuntimeSandbox] = []
        if not self._state_root.is_dir():
            return found
        for state_dir in sorted(self._state_root.iterdir()):
            if not state_dir.is_dir():
                continue
            sandbox_id = state_dir.name
            state = _load_state(state_dir)
            if self._pid(sandbox_id) is None:
                runtime_state = RuntimeState.GONE
            elif SandboxCgroup(self._cgroup_host, sandbox_id).frozen():
                runtime_state = RuntimeState.PAUSED
            else:
                runtime_state = RuntimeState.RUNNING
            found.append(RuntimeSandbox(sandbox_id, str(state.get("ref", "")), runtime_state))
        return found

    def _pid(self, sandbox_id: str) -> int | None:
        state = _load_state(self._state_root / sandbox_id)
        pid = state.get("init_pid")
        if not isinstance(pid, int) or not state.get("started"):
            return None
        return pid if _alive(pid, state.get("init_start")) else None

    def _read_state(self, sandbox_id: str) -> dict[str, Any]:
        state = _load_state(self._state_root / sandbox_id)
        if not state:
            raise RuntimeUnavailable(f"bwrap sandbox {sandbox_id} not found")
        return state

    async def _run(self, func: Callable[[], T]) -> T:
        try:
            return await asyncio.to_thread(func)
        except OSError as exc:
            raise RuntimeUnavailable(f"bwrap runtime: {exc}") from None


def unavailable_message(failing: list[Requirement]) -> str:
    parts = [f"{r.feature}: {r.detail}" + (f" (fix: {r.fix})" if r.fix else "") for r in failing]
    return (
        "the bwrap runtime cannot isolate sandboxes on this host, so none are started: "
        + "; ".join(parts)
    )


# -- helpers ----------------------------------------------------------------------------------


def _ref(spec: SandboxSpec) -> str:
    return f"bwrap-{spec.sandbox_id}"


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(f"sandgate-{name}", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _read_child_pid(info_r: int, log: Path) -> int:
    """bubblewrap's ``--info-fd`` JSON; its end of the pipe closes once written (or on exit)."""
    data = b""
    deadline = time.monotonic() + _INFO_TIMEOUT_S
    while b"}" not in data:
        left = deadline - time.monotonic()
        ready, _, _ = select.select([info_r], [], [], max(0.0, left))
        if not ready:
            raise RuntimeUnavailable("bubblewrap did not start within 10 s")
        chunk = os.read(info_r, 4096)
        if not chunk:
            break
        data += chunk
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError):
        tail = log.read_text(errors="replace")[-800:] if log.exists() else ""
        raise RuntimeUnavailable(f"bubblewrap failed to start: {tail.strip()}") from None


def _parent_pid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[1])


def _start_time(pid: int) -> int:
    """Clock ticks since boot at which ``pid`` started: tells a pid from its reuse."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rpartition(")")[2].split()[19])


def _alive(pid: int, start: object) -> bool:
    try:
        return _start_time(pid) == start
    except (OSError, ValueError, IndexError):
        return False


class _NestedUsernsLock:
    """Sets ``user.max_user_namespaces=0`` inside the sandbox's user namespace.

    The sysctl is per user namespace and is read through the writer's own namespace, so a
    helper joins it (``nsenter``) and becomes its root. Nothing inside can raise it back:
    sandbox processes have no ``CAP_SYS_RESOURCE`` and ``/proc/sys`` is read-only. The helper
    starts on entering the ``with`` block; leaving it waits for the helper and raises
    ``RuntimeUnavailable`` if it failed (bubblewrap's ``--assert-userns-disabled`` checks too).
    """

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> None:
        self._proc = subprocess.Popen(
            [
                shutil.which("nsenter") or "nsenter",
                "--user",
                f"--target={self._pid}",
                "--",
                "/bin/sh",
                "-c",
                "echo 0 > /proc/sys/user/max_user_namespaces",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd="/",
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )

    def __exit__(self, *exc_info: object) -> None:
        if self._proc is None:
            return
        try:
            _, stderr = self._proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            _, stderr = self._proc.communicate()
        if self._proc.returncode != 0 and exc_info[0] is None:
            raise RuntimeUnavailable(
                "user namespaces: cannot disable nested user namespaces in the sandbox "
                f"({(stderr or '').strip()[:200]}); refusing to start it weaker"
            )


def _write_state(state_dir: Path, state: dict[str, Any]) -> None:
    temp = state_dir / f".{_STATE_FILE}.tmp"
    temp.write_text(json.dumps(state, indent=1))
    temp.rename(state_dir / _STATE_FILE)


def _load_state(state_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((state_dir / _STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


_libc = ctypes.CDLL(None, use_errno=True)
_MS_BIND = 4096
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MNT_DETACH = 2
#: What ``_stage`` mounts under a sandbox's stage directory.
_STAGED = ("root", "run", "home", "tmp", "pts")


def _stage(spec: SandboxSpec, uid: int, rootfs: Path) -> Path:
    """Prepares ``<stage>`` (mode 0700, owned by the sandbox's root uid ``uid``) with what
    bubblewrap binds into the sandbox: ``root`` (the template's tree) and ``run`` (the
    sandbox's directory), bind mounts; ``home`` and ``tmp``, tmpfs with size *and* inode caps
    (bubblewrap's own ``--tmpfs`` has no inode option); ``pts``, a devpts instance of its own
    capped at ``max_ptys`` (RES-14). Owners are host uids of the sandbox's range, so inside they
    are the sandbox's user (home) and root (``/tmp``), and ``tty`` for terminals."""
    _STAGE_DIR.mkdir(parents=True, exist_ok=True)
    for path in (_RUN_DIR, _STAGE_DIR):
        path.chmod(0o711)
    stage = _STAGE_DIR / spec.sandbox_id
    stage.mkdir(mode=0o700)
    os.chown(stage, uid, uid)
    try:
        for source, name in ((rootfs, "root"), (spec.host_dir, "run")):
            _mount(bytes(source), stage / name, None, _MS_BIND, None)
        user = uid + spec.home_uid
        home = (
            f"size={spec.disk_size_mb}m,nr_inodes={inode_limit(spec.disk_size_mb)},"
            f"mode=0755,uid={user},gid={user}"
        )
        tmp = f"size={spec.tmp_size_mb}m,nr_inodes={inode_limit(spec.tmp_size_mb)},mode=1777"
        tmp += f",uid={uid},gid={uid}"
        flags = _MS_NOSUID | _MS_NODEV
        _mount(b"tmpfs", stage / "home", b"tmpfs", flags, home.encode())
        _mount(b"tmpfs", stage / "tmp", b"tmpfs", flags, tmp.encode())
        pts = f"newinstance,max={spec.max_ptys},ptmxmode=0666,mode=0620,gid={uid + TTY_GID}"
        _mount(b"devpts", stage / "pts", b"devpts", _MS_NOSUID | _MS_NOEXEC, pts.encode())
    except BaseException:
        _unstage(spec.sandbox_id)
        raise
    return stage


def _mount(
    source: bytes, target: Path, fstype: bytes | None, flags: int, options: bytes | None
) -> None:
    target.mkdir()
    if _libc.mount(source, bytes(target), fstype, flags, options) != 0:
        error = ctypes.get_errno()
        raise RuntimeUnavailable(
            f"bwrap runtime: cannot mount {source.decode()} at {target}: {os.strerror(error)}"
        )


def _unstage(sandbox_id: str) -> None:
    stage = _STAGE_DIR / sandbox_id
    for name in _STAGED:
        target = stage / name
        if target.is_dir():
            _libc.umount2(bytes(target), _MNT_DETACH)
            with contextlib.suppress(OSError):
                target.rmdir()
    with contextlib.suppress(OSError):
        stage.rmdir()


def _claim_slot(state_dir: Path) -> int:
    """The lowest free uid slot, claimed host-wide (``O_EXCL``) for ``state_dir``.

    A claim whose sandbox state is gone and whose cgroup holds no process is stale (its
    gateway's home was deleted) and is taken over.
    """
    _CLAIMS_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    taken = {int(p.name) for p in _CLAIMS_DIR.iterdir() if p.name.isdigit()}
    record = json.dumps({"state": str(state_dir)}).encode()
    for slot in range(_MAX_SLOTS):
        claim = _CLAIMS_DIR / str(slot)
        if slot in taken and not _stale(claim):
            continue
        if slot in taken:
            with contextlib.suppress(FileNotFoundError):
                claim.unlink()
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        try:
            os.write(fd, record)
        finally:
            os.close(fd)
        return slot
    raise RuntimeUnavailable(f"bwrap runtime: all {_MAX_SLOTS} uid ranges are in use")


def _stale(claim: Path) -> bool:
    try:
        owner = Path(json.loads(claim.read_text())["state"])
    except (OSError, ValueError, KeyError, TypeError):
        return False  # being written right now, or unreadable: leave it alone
    if owner.is_dir():
        return False
    uid = UID_BASE + int(claim.name) * UIDS_PER_SANDBOX
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if uid <= proc.stat().st_uid < uid + UIDS_PER_SANDBOX:
                    return False
    return True


def _release_slot(slot: int, state_dir: Path) -> None:
    claim = _CLAIMS_DIR / str(slot)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        if Path(json.loads(claim.read_text())["state"]) == state_dir:
            claim.unlink()
