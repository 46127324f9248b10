"""``python3 -m sandgate.interpreter.supervisor``: keeps the code-interpreter server running.

The template's start command runs this instead of the server itself, as the sandbox user. It
starts ``python3 -m sandgate.interpreter`` and starts it again whenever it exits: killed by
sandbox code, by the OOM killer, or crashed. The new server reclaims what the old one left
(its contexts keep their ids, orphaned kernels are stopped; see ``_state``), so the next
``run_code`` works without the caller doing anything.

The supervisor owns the server's socket: it binds ``127.0.0.1:49999`` and hands the bound
socket to each server (``SANDGATE_INTERPRETER_LISTEN_FD``), which starts listening once its
default kernel is up. The socket outlives a server that dies, so requests sent while the next
one starts wait in the listen queue instead of failing. After ``MAX_QUICK_DEATHS`` servers in
a row died within ``STABLE_S`` of their start, the socket is closed (waiting requests fail at
once, callers see the port closed) and a fresh one is bound for the next try.

Restarts back off from ``MIN_DELAY_S`` to ``MAX_DELAY_S`` while the server keeps dying within
``STABLE_S``, so a server that cannot start does not spin a CPU. SIGTERM, SIGINT or SIGHUP stop
the server and then the supervisor.

Trust: like the server, this runs as the sandbox user and protects nothing from sandbox code,
which may kill both; it exists so that accidents and crashes heal themselves.
Standard library only (it runs on the image's ``python3``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

__all__ = ["LISTEN_FD_ENV", "MAX_DELAY_S", "MAX_QUICK_DEATHS", "MIN_DELAY_S", "STABLE_S", "main"]

LISTEN_FD_ENV = "SANDGATE_INTERPRETER_LISTEN_FD"
MIN_DELAY_S = 0.1
MAX_DELAY_S = 5.0
STABLE_S = 30.0
"""A server that ran this long before exiting is restarted after ``MIN_DELAY_S`` again."""
MAX_QUICK_DEATHS = 5
DEFAULT_PORT = 49999

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Supervisor:
    """Runs ``argv`` in ``cwd`` until told to stop, restarting it whenever it exits, and
    hands it a socket bound to ``port`` on loopback."""

    def __init__(self, argv: list[str], cwd: Path, port: int) -> None:
        self._argv = argv
        self._cwd = cwd
        self._port = port
        self._socket: socket.socket | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._stopping = False

    def stop(self, signum: int, frame: FrameType | None = None) -> None:
        """Signal handler: passes SIGTERM on to the server and ends the loop."""
        del frame
        self._stopping = True
        child = self._child
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
        _log(f"stopping on signal {signum}")

    def run(self) -> int:
        delay, quick_deaths = MIN_DELAY_S, 0
        while not self._stopping:
            started = time.monotonic()
            self._run_server()
            if self._stopping:
                break
            if time.monotonic() - started >= STABLE_S:
                delay, quick_deaths = MIN_DELAY_S, 0
            else:
                quick_deaths += 1
            if quick_deaths >= MAX_QUICK_DEATHS:
                _log(f"{quick_deaths} quick deaths in a row: refusing waiting requests")
                self._close_socket()
                quick_deaths = 0
            time.sleep(delay)
            delay = min(delay * 2, MAX_DELAY_S)
        self._close_socket()
        return 0

    def _run_server(self) -> None:
        env, fds = dict(os.environ), tuple[int, ...]()
        sock = self._bound_socket()
        if sock is not None:
            env[LISTEN_FD_ENV], fds = str(sock.fileno()), (sock.fileno(),)
        try:
            self._child = subprocess.Popen(self._argv, cwd=self._cwd, env=env, pass_fds=fds)
        except OSError as exc:
            _log(f"cannot start the server: {exc}")
            return
        status = self._child.wait()
        if not self._stopping:
            _log(f"the server exited ({_describe(status)}); restarting it")

    def _bound_socket(self) -> socket.socket | None:
        """The socket to hand over, bound now if need be; ``None`` (the server then binds
        its own) when the port is taken."""
        if self._socket is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", self._port))
            except OSError as exc:
                sock.close()
                _log(f"cannot bind 127.0.0.1:{self._port} ({exc}); the server will try")
                return None
            self._socket = sock
        return self._socket

    def _close_socket(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


def _describe(status: int) -> str:
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"status {status}"


def _log(message: str) -> None:
    print(f"sandgate-interpreter-supervisor[{os.getpid()}]: {message}", file=sys.stderr, flush=True)


def main() -> None:
    root = Path(__file__).resolve().parent.parent.parent
    port = int(os.environ.get("SANDGATE_INTERPRETER_PORT", DEFAULT_PORT))
    supervisor = Supervisor([sys.executable, "-m", "sandgate.interpreter"], root, port)
    for signum in _STOP_SIGNALS:
        signal.signal(signum, supervisor.stop)
    sys.exit(supervisor.run())


if __name__ == "__main__":
    main()
