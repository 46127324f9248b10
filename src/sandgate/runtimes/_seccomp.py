"""Translates Sandgate's seccomp profile (``profiles/bwrap-seccomp.json``) for both runtimes.

The profile is data, reviewed like code; this module only translates it: with libseccomp
(``libseccomp.so.2`` through ctypes, so no build step and no Python binding package) into the
raw ``struct sock_filter`` array that ``bwrap --seccomp FD`` installs just before it executes
the sandbox's first process (and in bwrap's own PID 1); and into the OCI JSON that Docker takes
as ``--security-opt seccomp=<json>``, so both runtimes deny the same calls. The Docker form
lists only the native architecture: x32 and foreign-architecture calls get runc's bad-arch
action instead of running.

Trust: the profile file ships with Sandgate; nothing here is influenced by a sandbox or a
request. A profile libseccomp cannot compile is an error, never a weaker filter.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import platform
from functools import cache
from pathlib import Path
from typing import Any

from sandgate.errors import RuntimeUnavailable

__all__ = ["PROFILE_PATH", "compile_profile", "docker_profile", "libseccomp_version"]

PROFILE_PATH = Path(__file__).parent / "profiles" / "bwrap-seccomp.json"

_ACT_ALLOW = 0x7FFF0000
_ACT_KILL_PROCESS = 0x80000000
_ACT_ERRNO = 0x00050000
_ATTR_ACT_BADARCH = 2
_CMP_NE = 1
_CMP_EQ = 4
_CMP_MASKED_EQ = 7
_OPS = {"ne": _CMP_NE, "eq": _CMP_EQ}
_OCI_OPS = {_CMP_NE: "SCMP_CMP_NE", _CMP_EQ: "SCMP_CMP_EQ", _CMP_MASKED_EQ: "SCMP_CMP_MASKED_EQ"}
_OCI_ARCH = {"x86_64": "SCMP_ARCH_X86_64", "aarch64": "SCMP_ARCH_AARCH64"}


class _ArgCmp(ctypes.Structure):
    _fields_ = (
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    )


@cache
def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        raise RuntimeUnavailable(
            "seccomp: libseccomp is not installed, so the bwrap runtime cannot build its "
            "syscall filter; install it (`apt-get install libseccomp2`)"
        ) from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = (ctypes.c_uint32,)
    lib.seccomp_release.argtypes = (ctypes.c_void_p,)
    lib.seccomp_attr_set.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32)
    lib.seccomp_syscall_resolve_name.argtypes = (ctypes.c_char_p,)
    lib.seccomp_rule_add_array.argtypes = (
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_ArgCmp),
    )
    lib.seccomp_export_bpf.argtypes = (ctypes.c_void_p, ctypes.c_int)
    return lib


def libseccomp_version() -> str:
    """``major.minor.micro`` of the loaded libseccomp; raises ``RuntimeUnavailable``."""

    class _Version(ctypes.Structure):
        _fields_ = (("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint))

    lib = _library()
    lib.seccomp_version.restype = ctypes.POINTER(_Version)
    version = lib.seccomp_version().contents
    return f"{version.major}.{version.minor}.{version.micro}"


def _comparisons(rule: dict[str, Any]) -> list[list[tuple[int, int, int, int]]]:
    """Each returned list is one libseccomp rule (its comparisons are ANDed)."""
    arg = int(rule.get("arg", 0))
    if "match_all" in rule:
        return [[(c["arg"], _OPS[c["op"]], c["value"], 0) for c in rule["match_all"]]]
    if "any_bit_of" in rule:
        return [[(arg, _CMP_MASKED_EQ, bit, bit)] for bit in rule["any_bit_of"]]
    if "equals_any" in rule:
        return [[(arg, _CMP_EQ, value, 0)] for value in rule["equals_any"]]
    if "masked_equals_any" in rule:
        mask = rule["masked_equals_any"]["mask"]
        return [[(arg, _CMP_MASKED_EQ, mask, v)] for v in rule["masked_equals_any"]["values"]]
    return [[]]


@cache
def compile_profile(path: Path = PROFILE_PATH) -> bytes:
    """The profile as BPF bytes for ``bwrap --seccomp``; raises ``RuntimeUnavailable``
    naming the syscall or rule that libseccomp refused."""
    profile = json.loads(path.read_text(encoding="utf-8"))
    lib = _library()
    ctx = lib.seccomp_init(_ACT_ALLOW)
    if not ctx:
        raise RuntimeUnavailable("seccomp: libseccomp could not create a filter context")
    try:
        # SECURITY: x32 and foreign-architecture calls bypass an x86-64 syscall table; kill.
        rc = lib.seccomp_attr_set(ctx, _ATTR_ACT_BADARCH, _ACT_KILL_PROCESS)
        if rc != 0:
            raise RuntimeUnavailable(f"seccomp: cannot set the bad-arch action ({-rc})")
        default_errno = getattr(errno, profile["default_errno"])
        for rule in profile["rules"]:
            action = _ACT_ERRNO | getattr(errno, rule.get("errno", ""), default_errno)
            for name in rule["syscalls"]:
                number = lib.seccomp_syscall_resolve_name(name.encode())
                if number < 0:  # unknown to this libseccomp/arch: nothing to deny
                    continue
                for comparisons in _comparisons(rule):
                    array = (_ArgCmp * max(1, len(comparisons)))(
                        *(_ArgCmp(*c) for c in comparisons)
                    )
                    rc = lib.seccomp_rule_add_array(ctx, action, number, len(comparisons), array)
                    if rc != 0:
                        raise RuntimeUnavailable(
                            f"seccomp: libseccomp refused the rule for {name} "
                            f"({os.strerror(-rc)}); see {path.name}"
                        )
        fd = os.memfd_create("sandgate-seccomp", os.MFD_CLOEXEC)
        try:
            rc = lib.seccomp_export_bpf(ctx, fd)
            if rc != 0:
                raise RuntimeUnavailable(f"seccomp: export failed ({os.strerror(-rc)})")
            size = os.lseek(fd, 0, os.SEEK_END)
            program = os.pread(fd, size, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)
    if not program or len(program) % 8:
        raise RuntimeUnavailable("seccomp: libseccomp produced an invalid program")
    return program


@cache
def docker_profile(path: Path = PROFILE_PATH) -> str:
    """The profile as OCI seccomp JSON (default allow, the same denials and errnos).

    Raises ``RuntimeUnavailable`` on an architecture the profile was not written for."""
    machine = platform.machine()
    if machine not in _OCI_ARCH:
        raise RuntimeUnavailable(f"seccomp: no profile for the {machine} architecture")
    profile = json.loads(path.read_text(encoding="utf-8"))
    default_errno = getattr(errno, profile["default_errno"])
    syscalls: list[dict[str, Any]] = []
    for rule in profile["rules"]:
        errno_ret = getattr(errno, rule.get("errno", ""), default_errno)
        for comparisons in _comparisons(rule):
            entry: dict[str, Any] = {
                "names": list(rule["syscalls"]),
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": errno_ret,
            }
            if comparisons:
                entry["args"] = [
                    {"index": arg, "value": a, "valueTwo": b, "op": _OCI_OPS[op]}
                    for arg, op, a, b in comparisons
                ]
            syscalls.append(entry)
    return json.dumps(
        {
            "defaultAction": "SCMP_ACT_ALLOW",
            "architectures": [_OCI_ARCH[machine]],
            "syscalls": syscalls,
        }
    )
