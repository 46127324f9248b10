"""bwrap runtime: daemonless sandboxes on bubblewrap, seccomp and cgroups (security.md §3.2).

Trust: the sandbox's contents are hostile from their first instruction; the gateway (running
as root) is trusted. What this module enforces, as defaults no config can weaken:

* **Namespaces**: new user, mount, pid, ipc, uts, net and cgroup namespaces; the network
  namespace holds only ``lo``.
* **A distinct host uid range per sandbox** (``_uids``): the user namespace maps sandbox ids
  0..65535 to a range no host user and no other live sandbox has. It is the uid slot's own
  namespace (``_idmap.slot_userns``: made once per slot, as the range's first uid, so that uid
  owns it and per-user kernel counts are charged to it; its multi-id maps written by this
  process as root, since plain ``bwrap --uid`` maps one id and the guest must switch between
  root and ``user``), the one the stage's idmapped mounts use and Docker sandboxes of the slot
  join. bubblewrap runs *as* the range's first uid (no host privilege) and joins it with
  ``--userns``; a slot serves one live sandbox at a time. Joining it instead of making one per
  sandbox spares each create the map writes and a helper process (measured in
  docs/benchmarks.md, "Bubblewrap in the slot's user namespace").
* **No nested user namespaces**: ``user.max_user_namespaces=0`` is set *inside* the slot's
  user namespace when it is made (by a helper that is its root then), which nothing inside
  can raise; ``--assert-userns-disabled`` makes bubblewrap verify it on every create, and the
  seccomp filter also refuses ``unshare``/``setns``/``clone(CLONE_NEW*)``.
* **Capabilities**: ``--cap-drop ALL`` plus ``GUEST_CAPABILITIES``, all relative to the
  sandbox's user namespace; processes of the default user hold none.
* **no_new_privs** and a **seccomp** filter from ``profiles/bwrap-seccomp.json`` (libseccomp),
  installed by bubblewrap; foreign-arch/x32 calls kill.
* **Cgroup** per sandbox (v1 or v2): memory = memory+swap (processes plus the disk), pids, CPU;
  the freezer for pause; kill = every process of the cgroup (RES-10). Bubblewrap's processes
  are born in it (v1: the launcher joins first) or moved in (v2), always before it goes on.
  rlimits: nofile, core=0.
* **File system** (``_stage``): a writable root that is the sandbox's own copy-on-write layer
  of ``limits.disk_mib`` over the template (idmapped, read-only); ``nosuid``/``nodev``
  everywhere; a devpts instance of its own; the sandbox's host directory read-only at
  ``/run/sandgate``; team volumes it asked for, idmapped, at their paths; bind sources are
  under a stage directory only the sandbox's root uid (and root) can enter.
* **The guest is PID 1** (``--as-pid-1``): nothing inside can signal or stop it; its listening
  socket is bound by the gateway, mode 0600, so nothing inside can connect to it either.
* ``--new-session`` (no controlling terminal; TIOCSTI also filtered), ``--clearenv``.

Deliberate difference from the reference invocation: no ``--die-with-parent``. Sandboxes must
survive a gateway crash or restart (design §2), so bubblewrap runs in a session of its own
(init adopts it when the gateway ends); the state under ``$SANDGATE_HOME/bwrap/<id>/`` lets
:meth:`list` find them again, and the service kills those nobody wants.

Left to other layers: who may create sandboxes (the control plane), egress (the gateway),
Landlock (not used). The gateway must run as root; rootless operation is not supported.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import resource
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes._bwrap_host import (
    BWRAP_MIN_VERSION,
    Requirement,
    bwrap_version,
    check_host,
    unavailable_message,
)
from sandgate.runtimes._cgroups import CgroupHost, CgroupLimits, SandboxCgroup, detect
from sandgate.runtimes._idmap import slot_userns
from sandgate.runtimes._rootfs import resolve_rootfs
from sandgate.runtimes._seccomp import compile_profile
from sandgate.runtimes._stage import (
    STAGE_DIR,
    Stage,
    layer_in_use,
    save_layer,
    stage_sandbox,
    unstage,
)
from sandgate.runtimes._stats import CgroupFiles, SandboxStats, read_many
from sandgate.runtimes._threads import off_loop
from sandgate.runtimes._uids import (
    UID_BASE,
    UIDS_PER_SANDBOX,
    claim_slot,
    release_slot,
    uid_base,
)
from sandgate.runtimes.base import (
    GUEST_CAPABILITIES,
    GUEST_DIR_IN_SANDBOX,
    GUEST_OOM_SCORE_ADJ,
    GUEST_SOCKET,
    SHM_MB,
    RuntimeSandbox,
    RuntimeState,
    SandboxSpec,
    guest_command,
    memory_limit_bytes,
)
from sandgate.runtimes.oci_shim import bind_listener

__all__ = [
    "BWRAP_MIN_VERSION",
    "UIDS_PER_SANDBOX",
    "UID_BASE",
    "BwrapRuntime",
    "Requirement",
    "check_host",
    "unavailable_message",
]

T = TypeVar("T")

_INFO_TIMEOUT_S = 10.0
#: How long a kill waits for bubblewrap's monitor, SIGKILLed just before, to be reaped.
_REAP_TIMEOUT_S = 5.0
_STATE_FILE = "state.json"


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
        #: bubblewrap's monitors this process started, until their sandbox is killed.
        self._launched: dict[str, subprocess.Popen[bytes]] = {}

    # -- protocol -------------------------------------------------------------------------

    async def ping(self) -> str:
        return await off_loop(self._ensure_host)

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

    async def guest_log(self, sandbox_id: str, limit: int = 4096) -> str:
        return await self._run(partial(_tail, Stage(STAGE_DIR / sandbox_id).log, limit))

    async def layer_in_use(self, sandbox_id: str) -> int:
        return await self._run(partial(layer_in_use, sandbox_id))

    async def save_layer(self, sandbox_id: str, archive: Path) -> int:
        return (await self._run(partial(save_layer, sandbox_id, archive))).size_bytes

    async def inspect(self, sandbox_id: str) -> dict[str, Any]:
        """The recorded state of a sandbox (posture tests and ``doctor`` read it)."""
        return await self._run(partial(self._read_state, sandbox_id))

    async def stats(self, sandbox_ids: Sequence[str]) -> dict[str, SandboxStats]:
        return await self._run(partial(self._stats, tuple(sandbox_ids)))

    # -- host checks ----------------------------------------------------------------------

    def _ensure_host(self) -> str:
        """Checks the host once; raises ``RuntimeUnavailable`` naming what is missing."""
        if self._checked is None:
            failing = [r for r in check_host() if not r.ok]
            if failing:
                raise RuntimeUnavailable(unavailable_message(failing))
            self._cgroups = detect()
            version = bwrap_version(shutil.which("bwrap") or "bwrap") or (0,)
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
        problem = nofile_problem(spec.nofile)
        if problem is not None:
            raise RuntimeUnavailable(problem)
        rootfs = resolve_rootfs(
            spec.image_ref, self._rootfs_dir, self._docker_base_url, spec.image_id
        )
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
        slot = claim_slot(state_dir)
        base = uid_base(slot)
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
        stage = stage_sandbox(
            spec.sandbox_id,
            base=base,
            tree=rootfs,
            host_dir=spec.host_dir,
            disk_mib=spec.disk_mib,
            max_ptys=spec.max_ptys,
            seeds=spec.seeds,
            info={"instance": self._instance_id, "runtime": "bwrap", "slot": slot},
            volumes=[volume.source for volume in spec.volumes],
            layer=spec.layer,
            guest=spec.guest,
        )
        fds: list[int] = []
        try:
            listen_fd = bind_listener(str(spec.host_dir / GUEST_SOCKET))
            os.set_inheritable(listen_fd, True)
            fds.append(listen_fd)
            info_r, info_w = os.pipe()
            block_r, block_w = os.pipe()
            fds += [info_r, info_w, block_r, block_w]
            seccomp_fd = _memfd("seccomp", compile_profile())
            fds.append(seccomp_fd)
            # The slot's user namespace: made (and locked) once per slot, kept open by this
            # process; the stage's idmapped mounts above already use it. Not to be closed.
            userns_fd = slot_userns(base, UIDS_PER_SANDBOX)
            env = {**image_env, "LANG": "C.UTF-8", "HOME": "/root", "HOSTNAME": "sandbox"}
            argv = self._argv(
                spec,
                stage,
                env,
                workdir,
                info_w=info_w,
                block_r=block_r,
                seccomp_fd=seccomp_fd,
                listen_fd=listen_fd,
                userns_fd=userns_fd,
            )
            # The guest's log lives on the sandbox's own disk: bounded by its quota, gone with
            # it, invisible inside (the guest is PID 1 and not dumpable).
            log_fd = os.open(stage.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            fds.append(log_fd)
            join_files = cgroup.join_files()
            launcher = start_launcher(
                _launcher_argv(spec.nofile, base, join_files, argv),
                pass_fds=(info_w, block_r, seccomp_fd, listen_fd, userns_fd),
                stderr=log_fd,
            )
            # The launcher becomes bubblewrap's monitor: this process's child until the
            # sandbox is killed (``_kill`` reaps it) or this process ends (init adopts it).
            self._launched[spec.sandbox_id] = launcher
            if not join_files:
                # v2: the first move after a quiet spell waits out an RCU grace period;
                # moving the launcher now pays it while bubblewrap starts, and the move of
                # bubblewrap's child below comes cheap.
                with contextlib.suppress(OSError):
                    cgroup.add(launcher.pid)
            for fd in (info_w, block_r, listen_fd):
                os.close(fd)
                fds.remove(fd)
            try:
                # A launcher or bubblewrap that fails closes the pipe unwritten: the error
                # then carries their words from the log.
                child = _read_child_pid(info_r, stage.log)
            except BaseException:
                # bubblewrap, unknown to the state record yet, waits on block_r for ever:
                # nothing else kills it.
                _kill_launched(stage)
                self._reap(spec.sandbox_id)
                raise
            monitor = _parent_pid(child)
            state.update(
                init_pid=child,
                init_start=_start_time(child),
                monitor_pid=monitor,
                monitor_start=_start_time(monitor),
                ref=_ref(spec),
            )
            _write_state(state_dir, state)
            # bubblewrap waits on block_r before it runs the guest; nothing of the sandbox
            # has run yet.
            if join_files:
                # Born inside (the launcher joined before it became bubblewrap, which
                # then forked the child): checked, not moved.
                if not (cgroup.holds(monitor) and cgroup.holds(child)):
                    raise RuntimeUnavailable(
                        f"cgroups: bubblewrap's processes of {spec.sandbox_id} are not in "
                        "the sandbox's cgroup; refusing to start it without its limits"
                    )
            else:
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
        stage: Stage,
        env: dict[str, str],
        workdir: str,
        *,
        info_w: int,
        block_r: int,
        seccomp_fd: int,
        listen_fd: int,
        userns_fd: int,
    ) -> builtins.list[str]:
        mib = 1024 * 1024
        argv = [
            shutil.which("bwrap") or "bwrap",
            # The slot's user namespace (``_idmap.slot_userns``), not a new one: the same ids
            # and lock as a namespace of its own, without a per-sandbox map and lock helper.
            "--userns", str(userns_fd),
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
            "--block-fd", str(block_r),
            "--info-fd", str(info_w),
            "--assert-userns-disabled",
            "--new-session",
            "--as-pid-1",
            "--cap-drop", "ALL",
        ]  # fmt: skip
        for cap in GUEST_CAPABILITIES:
            argv += ["--cap-add", f"CAP_{cap}"]
        argv += ["--clearenv"]
        for key, value in sorted(env.items()):
            argv += ["--setenv", key, value]
        argv += [
            "--hostname", "sandbox",
            "--bind", str(stage.root), "/",
            "--proc", "/proc",
            "--dev", "/dev",
            "--dev-bind", str(stage.pts), "/dev/pts",
            "--size", str(SHM_MB * mib), "--perms", "1777", "--tmpfs", "/dev/shm",
            "--ro-bind", str(stage.run), GUEST_DIR_IN_SANDBOX,
        ]  # fmt: skip
        for index, volume in enumerate(spec.volumes):
            argv += ["--bind", str(stage.volume(index)), volume.target]
        chdir = workdir if (stage.root / workdir.lstrip("/")).is_dir() else "/"
        argv += ["--chdir", chdir, "--seccomp", str(seccomp_fd), "--"]
        argv += guest_command(listen_fd)
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
        self._reap(sandbox_id)
        unstage(sandbox_id)
        slot = state.get("slot")
        if isinstance(slot, int):
            release_slot(slot, state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)

    def _reap(self, sandbox_id: str) -> None:
        """Waits for the sandbox's bubblewrap monitor if this process started it (killed just
        before), so that it leaves no zombie. One that will not end within the timeout is left
        to ``subprocess``, which reaps abandoned children at its next start of a process."""
        launcher = self._launched.pop(sandbox_id, None)
        if launcher is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                launcher.wait(_REAP_TIMEOUT_S)

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
        self._reap_ended({s.sandbox_id for s in found if s.state is not RuntimeState.GONE})
        return found

    def _reap_ended(self, live: set[str]) -> None:
        """Reaps the monitors of sandboxes that ended without this process's kill (another
        process killed them: a CLI ``kill``; or their guest exited). The reaper lists the
        sandboxes periodically, so no zombie lingers."""
        for sandbox_id, launcher in builtins.list(self._launched.items()):
            if sandbox_id not in live and launcher.poll() is not None:
                self._launched.pop(sandbox_id, None)

    def _stats(self, sandbox_ids: tuple[str, ...]) -> dict[str, SandboxStats]:
        host = self._cgroup_host
        if host.missing:
            return {}
        wanted: dict[str, tuple[CgroupFiles, Path]] = {
            sandbox_id: (
                SandboxCgroup(host, sandbox_id).stat_files(),
                Stage(STAGE_DIR / sandbox_id).disk,
            )
            for sandbox_id in sandbox_ids
        }
        return read_many(wanted)

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
            return await off_loop(func)
        except OSError as exc:
            raise RuntimeUnavailable(f"bwrap runtime: {exc}") from None


# -- helpers ----------------------------------------------------------------------------------


def _ref(spec: SandboxSpec) -> str:
    return f"bwrap-{spec.sandbox_id}"


def _launcher_argv(nofile: int, base: int, join_files: list[Path], argv: list[str]) -> list[str]:
    """What starts bubblewrap, one program replacing the next:

    * ``sh``, as root: lowers the rlimits (nofile, core=0; lowering needs no privilege,
      and everything in the sandbox inherits them) and, on cgroup v1, writes ``0`` to the
      sandbox's ``tasks`` files so that it, and all it starts, is inside the sandbox's
      cgroup before bubblewrap exists (see ``SandboxCgroup.join_files``). Any failure
      ends it before anything else runs.
    * SECURITY: ``setpriv`` drops to the range's first uid/gid with no supplementary
      groups (real, effective and saved ids; root's capabilities go with uid 0). Doing
      these steps in Popen's child instead would make it fork the gateway, not vfork.
    * ``exec``: bubblewrap replaces the launcher, so the launcher's process is bubblewrap's
      monitor, in a session of its own (``start_new_session``; a ``setsid --fork`` in the
      chain cost every create another program's start). It outlives a gateway restart as any
      child does, adopted by init.
    """
    script = (
        'ulimit -n "$1" && ulimit -c 0 || { echo "$0: cannot lower the limits" >&2; exit 1; }; '
        "shift; "
        'while [ "$1" != -- ]; do '
        'echo 0 > "$1" || { echo "$0: cannot join the cgroup: $1" >&2; exit 1; }; shift; '
        "done; shift; "
        'exec "$@"'
    )
    return [
        "/bin/sh", "-c", script, "sandgate-launch", str(nofile),
        *(str(path) for path in join_files), "--",
        shutil.which("setpriv") or "setpriv",
        f"--reuid={base}", f"--regid={base}", "--clear-groups", "--",
        *argv,
    ]  # fmt: skip


def start_launcher(
    launcher_argv: list[str],
    *,
    pass_fds: Sequence[int] = (),
    stdout: int = subprocess.DEVNULL,
    stderr: int = subprocess.DEVNULL,
) -> subprocess.Popen[bytes]:
    """Starts ``_launcher_argv``'s chain in a session of its own, from ``/`` with a bare
    ``PATH``; its process goes on as bubblewrap's monitor (vfork'd: no option here makes
    ``subprocess`` fork the gateway)."""
    return subprocess.Popen(
        launcher_argv,
        pass_fds=tuple(pass_fds),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        cwd="/",
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        start_new_session=True,
    )


#: ``CAP_SYS_RESOURCE``'s bit in ``/proc/<pid>/status``' capability masks.
_CAP_SYS_RESOURCE = 24


def nofile_problem(nofile: int) -> str | None:
    """Why a sandbox cannot get ``nofile`` open files here, or None. The launcher sets the
    limit on itself before it drops to the sandbox's uid, so it can go above the gateway's own
    hard limit only with ``CAP_SYS_RESOURCE`` (root in a container often lacks it)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and nofile <= hard:
        return None  # every create: no file read (a hard limit is never above fs.nr_open)
    ceiling = int(Path("/proc/sys/fs/nr_open").read_text())
    if nofile > ceiling:
        return (
            f"limits.nofile is {nofile}, above what this kernel allows any process "
            f"(fs.nr_open = {ceiling}): lower limits.nofile"
        )
    if hard == resource.RLIM_INFINITY:
        return None
    effective = next(
        (line.split()[1] for line in Path("/proc/self/status").read_text().splitlines()
         if line.startswith("CapEff:")),
        "0",
    )  # fmt: skip
    if int(effective, 16) >> _CAP_SYS_RESOURCE & 1:
        return None
    return (
        f"limits.nofile is {nofile}, above the gateway's own hard limit of open files "
        f"({hard}), which it cannot raise on this host (no CAP_SYS_RESOURCE): lower "
        "limits.nofile, or start the gateway with a higher limit (`ulimit -Hn`, systemd "
        "`LimitNOFILE=`)"
    )


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(f"sandgate-{name}", os.MFD_CLOEXEC)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _kill_launched(stage: Stage) -> None:
    """SIGKILLs the processes launched for ``stage`` whose pids were never learnt: those
    whose command line names its root (only bubblewrap's does)."""
    marker = os.fsencode(str(stage.root)) + b"\0"
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "cmdline").read_bytes():
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def _read_child_pid(info_r: int, log: Path) -> int:
    """bubblewrap's ``--info-fd`` JSON; its end of the pipe closes once written (or on exit)."""
    data = b""
    deadline = time.monotonic() + _INFO_TIMEOUT_S
    # poll, not select: a gateway holding a few hundred sandboxes has fds above 1024, which
    # select() refuses (it failed every create past ~330 sandboxes).
    waiter = select.poll()
    waiter.register(info_r, select.POLLIN)
    while b"}" not in data:
        left = deadline - time.monotonic()
        if not waiter.poll(max(0, int(left * 1000))):
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


def _tail(path: Path, limit: int) -> str:
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - limit))
            return file.read(limit).decode("utf-8", "replace")
    except OSError:
        return ""
