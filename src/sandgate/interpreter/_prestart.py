"""The default Python kernel, started before the server has imported what it needs to talk
to one.

A fresh sandbox's first ``run_code`` waits for the server to start and then for its default
kernel to start. One after the other, that was the server's own imports (``asyncio`` and
``jupyter_client``, ~0.12 s on this project's test machine) and then the kernel's (~0.2 s).
``python3 -m sandgate.interpreter`` calls :func:`prestart` before anything else (this module
is standard library only and cheap to import), so the kernel loads while the server imports.
``Kernel.start`` then hands the running process to jupyter_client if it was started exactly
as jupyter_client would have started it (same spec, command, working directory and
environment; ``Kernel._adopt``), and otherwise stops it and starts its own.

Only the first server of a sandbox does this (no saved state, so nothing to restore), for
the default python context (the server's user, ``DEFAULT_CWD``), and only when the
``python3`` kernel spec is ipykernel's plain one: its launcher, no ``env``, no provisioner.

Also here, because the prestart needs them before the server's imports: the environment
every kernel starts with (:func:`kernel_env`), where the server keeps its state
(:func:`state_path`), and the command that starts ipykernel (:func:`lean_launcher`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from ._options import DEFAULT_CWD

__all__ = ["KERNEL_NAME", "Prestarted", "kernel_env", "lean_launcher", "prestart", "state_path"]

#: The kernel spec of the default Python context.
KERNEL_NAME = "python3"
#: ``_launch.py``: ipykernel's launcher, less the imports a kernel needs not at start.
LAUNCHER = str(Path(__file__).with_name("_launch.py"))
#: The spec's command this module knows how to start (``{connection_file}`` is substituted).
_IPYKERNEL_ARGS = ["-m", "ipykernel_launcher", "-f", "{connection_file}"]
#: The interpreter names jupyter_client replaces with its own ``sys.executable`` (a path
#: such as Debian's ``/usr/bin/python3`` is kept).
_PYTHON_NAMES = {"python", f"python{sys.version_info[0]}", "python{}.{}".format(*sys.version_info)}
_PORT_NAMES = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")


def kernel_env() -> dict[str, str]:
    """The environment every kernel starts with: the sandbox's, minus our own settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDGATE_INTERPRETER_")}
    return env | {"PYDEVD_DISABLE_FILE_VALIDATION": "1"}


def state_path() -> Path:
    """Where the server keeps its state for the next one (``_state``):
    ``SANDGATE_INTERPRETER_STATE`` or ``~/.local/state/sandgate-interpreter/state.json``."""
    configured = os.environ.get("SANDGATE_INTERPRETER_STATE")
    if configured:
        return Path(configured)
    return Path.home() / ".local" / "state" / "sandgate-interpreter" / "state.json"


def lean_launcher(argv: list[str]) -> list[str]:
    """``argv`` with ipykernel's ``-m ipykernel_launcher`` replaced by ``_launch.py``; any
    other kernel's unchanged."""
    if len(argv) >= 3 and argv[1:3] == ["-m", "ipykernel_launcher"]:
        return [argv[0], LAUNCHER, *argv[3:]]
    return argv


class Prestarted:
    """A kernel process started by :func:`prestart`, with what it was started from."""

    __slots__ = (
        "_settled", "connection_file", "cwd", "env", "info", "process", "resource_dir",
        "spec_argv",
    )  # fmt: skip

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        *,
        resource_dir: str,
        spec_argv: list[str],
        cwd: str,
        env: dict[str, str],
        info: dict[str, object],
        connection_file: str,
    ) -> None:
        self.process = process
        self.resource_dir = resource_dir
        self.spec_argv = spec_argv
        self.cwd = cwd
        self.env = env
        self.info = info
        self.connection_file = connection_file
        self._settled = False

    def take(self) -> subprocess.Popen[bytes]:
        """The process, now owned by the caller (``discard`` no longer touches it)."""
        self._settled = True
        return self.process

    def discard(self) -> None:
        """Stops the process (its whole session) and removes its connection file, unless
        it was taken; idempotent."""
        if self._settled:
            return
        self._settled = True
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.connection_file)


def prestart() -> Prestarted | None:
    """Starts the default context's kernel if this is the sandbox's first server and the
    spec is one this module can start as jupyter_client would; ``None`` otherwise (the
    server then starts it the usual way). Never raises: this is only a head start."""
    try:
        if state_path().exists():
            return None  # a restarted server: it restores contexts before starting any
        resource_dir = _find_spec(KERNEL_NAME)
        if resource_dir is None:
            return None
        with open(os.path.join(resource_dir, "kernel.json"), encoding="utf-8") as f:
            spec = json.load(f)
        argv = spec.get("argv")
        if not _plain_ipykernel(spec, argv):
            return None
        os.makedirs(DEFAULT_CWD, exist_ok=True)
        info = _connection_info()
        connection_file = _write_connection_file(info)
        base_env = kernel_env()
        env = dict(base_env)
        env.pop("PYTHONEXECUTABLE", None)  # as jupyter_client does for Python kernels
        env["JPY_PARENT_PID"] = str(os.getpid())  # the kernel quits if the server dies
        python = sys.executable if argv[0] in _PYTHON_NAMES else os.path.expanduser(argv[0])
        command = [python, LAUNCHER, "-f", connection_file]  # as jupyter_client formats it
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, cwd=DEFAULT_CWD, env=env, start_new_session=True
        )
        assert process.stdin is not None
        process.stdin.close()  # as jupyter_client's launcher: the kernel reads no stdin
    except Exception as exc:  # a head start that fails is no start at all
        print(f"sandgate-interpreter: no prestarted kernel: {exc}", file=sys.stderr)
        return None
    return Prestarted(
        process,
        resource_dir=resource_dir,
        spec_argv=list(argv),
        cwd=DEFAULT_CWD,
        env=base_env,
        info=info,
        connection_file=connection_file,
    )


def _plain_ipykernel(spec: dict[str, object], argv: object) -> bool:
    metadata = spec.get("metadata")
    return (
        isinstance(argv, list)
        and len(argv) == 5
        and isinstance(argv[0], str)
        and argv[1:] == _IPYKERNEL_ARGS
        and not spec.get("env")
        and spec.get("interrupt_mode", "signal") == "signal"
        and not (isinstance(metadata, dict) and metadata.get("kernel_provisioner"))
    )


def _find_spec(name: str) -> str | None:
    """The directory of kernel spec ``name``, searched where jupyter_core's
    ``jupyter_path("kernels")`` looks on Linux, in its order, then IPython's directory (as
    ``_kernel._KernelSpecs``). jupyter_core itself costs ~60 ms to import here; a directory
    this finds that jupyter_client would not is caught when the kernel is adopted."""
    for directory in _kernel_dirs():
        resource_dir = os.path.join(directory, name)
        if os.path.isfile(os.path.join(resource_dir, "kernel.json")):
            return resource_dir
    return None


def _kernel_dirs() -> list[str]:
    home = os.path.expanduser("~")
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
    user = os.environ.get("JUPYTER_DATA_DIR") or os.path.join(data_home, "jupyter")
    system = ["/usr/local/share/jupyter", "/usr/share/jupyter"]
    prefix = os.path.join(sys.prefix, "share", "jupyter")
    paths = [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p]
    paths += [user, *([] if prefix in system else [prefix]), *system]
    ipython = os.environ.get("IPYTHONDIR") or os.path.join(home, ".ipython")
    return [os.path.join(p, "kernels") for p in paths] + [os.path.join(ipython, "kernels")]


def _connection_info() -> dict[str, object]:
    """Free loopback ports and a fresh key, as jupyter_client picks them."""
    sockets = [socket.socket() for _ in _PORT_NAMES]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        ports = [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
    return {
        **dict(zip(_PORT_NAMES, ports, strict=True)),
        "ip": "127.0.0.1",
        "key": os.urandom(16).hex(),
        "transport": "tcp",
        "signature_scheme": "hmac-sha256",
        "kernel_name": KERNEL_NAME,
    }


def _write_connection_file(info: dict[str, object]) -> str:
    """Writes ``info`` (it holds the key) readable by this user only, whole or not at all:
    the kernel reads it while it starts."""
    runtime = os.environ.get("JUPYTER_RUNTIME_DIR") or os.path.join(
        os.path.expanduser("~"), ".local", "share", "jupyter", "runtime"
    )
    os.makedirs(runtime, mode=0o700, exist_ok=True)
    path = os.path.join(runtime, f"kernel-sandgate-{os.urandom(8).hex()}.json")
    staged = f"{path}.tmp"
    fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(info, f)
    os.replace(staged, path)
    return path
