"""Host checks for the bwrap runtime: every isolation feature it needs, with the fix for each.

``check_host`` is cheap (a few ms, one ``bwrap`` run and one idmapped-overlay probe) and is run
once by the runtime before its first sandbox, by ``select`` when choosing a runtime, and by
``sandgate doctor``. A missing feature is never worked around: the runtime refuses to start
sandboxes and names what is missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes._cgroups import detect, missing_message
from sandgate.runtimes._idmap import MOUNT_ATTR_RDONLY, idmapped_bind
from sandgate.runtimes._seccomp import compile_profile
from sandgate.runtimes._uids import UID_BASE, UIDS_PER_SANDBOX

__all__ = [
    "BWRAP_MIN_VERSION",
    "Requirement",
    "bwrap_version",
    "check_host",
    "check_layers",
    "unavailable_message",
]

BWRAP_MIN_VERSION = (0, 8, 0)
#: A uid below every slot, used only to probe whether unprivileged user namespaces work.
_PROBE_UID = UID_BASE - 1
#: The uid range of the idmapped-overlay probe (just below the sandboxes' ranges).
_PROBE_BASE = UID_BASE - UIDS_PER_SANDBOX
_UTIL_LINUX = ("setpriv", "unshare")
_libc = ctypes.CDLL(None, use_errno=True)
_MNT_DETACH = 2


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
    version = bwrap_version(bwrap) if bwrap else None
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
    if root and not tools:
        found.append(check_layers())
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


def bwrap_version(bwrap: str) -> tuple[int, ...] | None:
    try:
        out = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except OSError:
        return None
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(p) for p in match.groups()) if match else None


def _probe_root() -> list[str]:
    """A root for the probe of just what runs ``/bin/true``. Not the host's ``/``: a
    recursive read-only bind of it remounts every mount below, and other sandboxes' staged
    mounts under ``/run/sandgate-rt`` come and go meanwhile, which failed the check (and a
    server start) whenever one vanished mid-way."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "lib32", "sbin"):
        path = Path("/") / name
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), f"/{name}"]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), f"/{name}"]
    return argv


def _check_userns(bwrap: str) -> Requirement:
    try:
        proc = subprocess.run(
            [bwrap, "--unshare-user", *_probe_root(), "--", "/bin/true"],
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


def check_layers() -> Requirement:
    """Can this kernel give a sandbox its own copy-on-write root (``_stage``): an idmapped
    bind mount used as an overlayfs lower layer? Probed for real on a scratch tmpfs."""
    feature = "idmapped overlay"
    fix = "use Linux >= 5.19 (idmapped mounts as overlayfs layers)"
    scratch = Path(tempfile.mkdtemp(prefix="sandgate-probe-"))
    mounted: list[Path] = []
    try:
        if _libc.mount(b"tmpfs", os.fsencode(scratch), b"tmpfs", 0, b"size=1m") != 0:
            return Requirement(feature, False, "cannot mount tmpfs (not root?)", fix)
        mounted.append(scratch)
        for name in ("tree", "lower", "upper", "work", "merged"):
            (scratch / name).mkdir()
        try:
            idmapped_bind(
                scratch / "tree", scratch / "lower", _PROBE_BASE, 65536, MOUNT_ATTR_RDONLY
            )
        except RuntimeUnavailable as exc:
            return Requirement(feature, False, exc.message[:200], fix)
        mounted.append(scratch / "lower")
        options = (
            f"lowerdir={scratch / 'lower'},upperdir={scratch / 'upper'},workdir={scratch / 'work'}"
        )
        merged = scratch / "merged"
        if _libc.mount(b"overlay", os.fsencode(merged), b"overlay", 0, options.encode()) != 0:
            error = os.strerror(ctypes.get_errno())
            return Requirement(feature, False, f"overlay on an idmapped layer: {error}", fix)
        mounted.append(merged)
        return Requirement(feature, True, "overlayfs over idmapped layers works")
    finally:
        for path in reversed(mounted):
            _libc.umount2(os.fsencode(path), _MNT_DETACH)
        with contextlib.suppress(OSError):
            shutil.rmtree(scratch)


def unavailable_message(failing: list[Requirement]) -> str:
    parts = [f"{r.feature}: {r.detail}" + (f" (fix: {r.fix})" if r.fix else "") for r in failing]
    return (
        "the bwrap runtime cannot isolate sandboxes on this host, so none are started: "
        + "; ".join(parts)
    )
