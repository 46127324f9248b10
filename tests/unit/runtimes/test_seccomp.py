"""The bwrap seccomp profile compiles, and every syscall it names exists (a typo would silently
deny nothing)."""

from __future__ import annotations

import ctypes
import json

from sandgate.runtimes._seccomp import PROFILE_PATH, compile_profile


def test_profile_compiles_to_bpf() -> None:
    program = compile_profile()
    assert len(program) % 8 == 0 and len(program) // 8 > 50


def test_every_profile_syscall_is_known_to_libseccomp() -> None:
    seccomp = ctypes.CDLL("libseccomp.so.2")
    seccomp.seccomp_syscall_resolve_name.argtypes = (ctypes.c_char_p,)
    profile = json.loads(PROFILE_PATH.read_text())
    names = {name for rule in profile["rules"] for name in rule["syscalls"]}
    unknown = {n for n in names if seccomp.seccomp_syscall_resolve_name(n.encode()) < 0}
    # Syscalls that do not exist on x86-64 at all (nothing to deny there).
    assert unknown <= {"_sysctl", "nfsservctl", "uselib"}, unknown
