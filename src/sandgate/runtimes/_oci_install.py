"""Installing Sandgate's OCI runtime shim (``oci_shim``) into the local Docker engine.

The engine runs Docker sandboxes with ``--runtime sandgate``; this module makes sure that
runtime exists and is ours: it writes the shim (a shell front that passes every call to
``runc`` except ``create``, and the Python module that handles ``create``) to
``/usr/local/libexec/sandgate/``, registers it under ``runtimes`` in ``/etc/docker/daemon.json``
(keeping every other setting) and reloads the engine with SIGHUP, which Docker applies to
``runtimes`` without restarting containers. Idempotent: a second call finds everything in place
and only asks the engine.

Only for a local engine and a gateway running as root; otherwise the runtime must already be
registered (``sandgate doctor`` prints the snippet), and creates refuse until it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

from sandgate._atomic import write_atomic
from sandgate.errors import RuntimeUnavailable

__all__ = ["RUNTIME_NAME", "SHIM_DIR", "daemon_snippet", "ensure_shim", "shim_script"]

RUNTIME_NAME = "sandgate"
SHIM_DIR = Path("/usr/local/libexec/sandgate")
_FRONT = SHIM_DIR / "oci-runtime"
_MODULE = SHIM_DIR / "oci_shim.py"
_DAEMON_JSON = Path("/etc/docker/daemon.json")
_PID_FILES = (Path("/var/run/docker.pid"), Path("/run/docker.pid"))
_RELOAD_TIMEOUT_S = 10.0


def shim_script(runc: str, python: str) -> str:
    """The shell front registered with the engine."""
    # The module is imported, not run as a script: Python keeps an imported module's bytecode
    # (``__pycache__``, next to it) and compiles a script's on every run, ~2 ms of each create.
    boot = f'import sys; sys.path.insert(0, "{SHIM_DIR}"); from oci_shim import main; main()'
    runc_q, python_q, boot_q = shlex.quote(runc), shlex.quote(python), shlex.quote(boot)
    return (
        "#!/bin/sh\n"
        "# Sandgate's OCI runtime (written by sandgate; see docs/operations.md#docker).\n"
        "# Every call goes to runc, except `create`, which prepares the sandbox first.\n"
        'case " $* " in\n'
        f'*" create "*) exec {python_q} -I -S -c {boot_q} --runc {runc_q} -- "$@" ;;\n'
        "esac\n"
        f'exec {runc_q} "$@"\n'
    )


def daemon_snippet() -> dict[str, Any]:
    return {"runtimes": {RUNTIME_NAME: {"path": str(_FRONT)}}}


def _python() -> str:
    for candidate in ("/usr/bin/python3", getattr(sys, "_base_executable", ""), sys.executable):
        if candidate and os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
    raise RuntimeUnavailable("no python3 interpreter for Sandgate's OCI runtime shim")


def ensure_shim(client: Any, *, runc: str, local: bool) -> None:
    """Makes the engine behind ``client`` run ``--runtime sandgate`` through our shim and
    ``runc``; raises ``RuntimeUnavailable`` with the fix when it cannot."""
    if local and os.geteuid() == 0:
        runc_path = shutil.which(runc) if "/" not in runc else runc
        if runc_path is None or not os.access(runc_path, os.X_OK):
            raise RuntimeUnavailable(
                f"the OCI runtime '{runc}' is not installed on this host (runtime.docker."
                "oci_runtime); install runc (apt-get install runc) or name its path"
            )
        if _write(_MODULE, Path(__file__).with_name("oci_shim.py").read_bytes(), 0o644):
            # Bytecode of the code before: Python checks it against the source's mtime and
            # size only, which a rewrite within the same second could leave equal.
            shutil.rmtree(SHIM_DIR / "__pycache__", ignore_errors=True)
        _write(_FRONT, shim_script(runc_path, _python()).encode(), 0o755)
    if _registered(client):
        return
    if not (local and os.geteuid() == 0):
        raise RuntimeUnavailable(
            "the Docker engine has no 'sandgate' runtime, which Docker sandboxes need (per-"
            "sandbox user namespaces). On the engine's host, as root, run `sandgate serve` "
            "once, or add to daemon.json: " + json.dumps(daemon_snippet())
        )
    _register()
    deadline = time.monotonic() + _RELOAD_TIMEOUT_S
    while not _registered(client):
        if time.monotonic() > deadline:
            raise RuntimeUnavailable(
                f"registered the 'sandgate' runtime in {_DAEMON_JSON}, but the Docker engine "
                "did not load it; restart the engine (systemctl restart docker) and retry"
            )
        time.sleep(0.05)


def _registered(client: Any) -> bool:
    runtimes = client.info().get("Runtimes") or {}
    entry = runtimes.get(RUNTIME_NAME)
    return isinstance(entry, dict) and entry.get("path") == str(_FRONT)


def _register() -> None:
    try:
        current = json.loads(_DAEMON_JSON.read_text()) if _DAEMON_JSON.exists() else {}
    except ValueError as exc:
        raise RuntimeUnavailable(
            f"{_DAEMON_JSON} is not valid JSON ({exc}); fix it, then add "
            + json.dumps(daemon_snippet())
        ) from None
    if not isinstance(current, dict):
        raise RuntimeUnavailable(f"{_DAEMON_JSON} must hold a JSON object")
    runtimes = dict(current.get("runtimes") or {})
    runtimes[RUNTIME_NAME] = daemon_snippet()["runtimes"][RUNTIME_NAME]
    current["runtimes"] = runtimes
    _write(_DAEMON_JSON, (json.dumps(current, indent=2) + "\n").encode(), 0o644)
    pid = _dockerd_pid()
    if pid is None:
        raise RuntimeUnavailable(
            f"registered the 'sandgate' runtime in {_DAEMON_JSON}, but found no dockerd to "
            "reload; restart the Docker engine"
        )
    os.kill(pid, signal.SIGHUP)


def _dockerd_pid() -> int | None:
    for path in _PID_FILES:
        with contextlib.suppress(OSError, ValueError):
            pid = int(path.read_text().strip())
            if Path(f"/proc/{pid}/comm").read_text().strip() == "dockerd":
                return pid
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if (proc / "comm").read_text().strip() == "dockerd":
                    return int(proc.name)
    return None


def _write(path: Path, data: bytes, mode: int) -> bool:
    """Replaces ``path`` atomically when its content differs; True when it did."""
    with contextlib.suppress(OSError):
        if path.read_bytes() == data:
            return False
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    write_atomic(path, data, mode=mode)
    return True
