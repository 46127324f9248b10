"""Attacker code run *inside* a sandbox: a Python script whose verdicts come back as JSON.

Adversarial tests want the exact errno of each attempt (security.md §2.1: "exact errno inside
the sandbox"), not a shell's paraphrase of it. :data:`PRELUDE` gives every script ``attempt``
(run a callable, record ``"OK"`` or the errno name), ``syscall`` (raw ``syscall(2)`` through
ctypes, raising ``OSError``) and an ``out`` dict that :func:`run_python` prints and parses.
Standard library only: the script runs in the template image.
"""

from __future__ import annotations

import json
from typing import Any

from tests.framework.envd import run

__all__ = ["PRELUDE", "run_python"]

PRELUDE = r"""
import ctypes, errno, json, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
out = {}

def errname(number):
    return errno.errorcode.get(number, str(number))

def attempt(name, action):
    try:
        action()
        out[name] = "OK"
    except OSError as exc:
        out[name] = errname(exc.errno)

def syscall(number, *args):
    ctypes.set_errno(0)
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, os.strerror(number))
    return result
"""


def run_python(
    url: str, sandbox: dict[str, Any], script: str, *, user: str | None = None
) -> dict[str, Any]:
    """Runs :data:`PRELUDE` + ``script`` in ``sandbox`` as ``user``; returns the ``out`` dict.

    Fails the test (with the script's stderr) if it does not exit 0 with JSON on stdout."""
    source = f"{PRELUDE}\n{script}\nprint(json.dumps(out))\n"
    result = run(
        url,
        sandbox["sandboxID"],
        sandbox["envdAccessToken"],
        f"python3 - <<'SANDGATE_PY'\n{source}\nSANDGATE_PY",
        user=user,
    )
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return data
