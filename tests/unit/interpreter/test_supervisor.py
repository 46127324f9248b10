"""The supervisor restarts what it runs and keeps its socket across restarts (real processes)."""

from __future__ import annotations

import signal
import socket
import sys
import threading
import time
from pathlib import Path

from sandgate.interpreter.supervisor import LISTEN_FD_ENV, Supervisor

# Serves one connection on the socket it was handed (answering its pid), then "crashes".
ONE_SHOT_SERVER = f"""
import os, socket, sys
sock = socket.socket(fileno=int(os.environ["{LISTEN_FD_ENV}"]))
sock.listen()
conn, _ = sock.accept()
conn.sendall(str(os.getpid()).encode())
conn.close()
sys.exit(3)
"""


def _ask(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.settimeout(30)
        return conn.recv(64).decode()


def test_a_server_that_dies_is_restarted_and_requests_meanwhile_wait(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    supervisor = Supervisor([sys.executable, "-c", ONE_SHOT_SERVER], tmp_path, port)
    runner = threading.Thread(target=supervisor.run)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                first = _ask(port)
                break
            except ConnectionRefusedError:  # the first server has not listened yet
                assert time.monotonic() < deadline, "the server never listened"
                time.sleep(0.05)
        # The first server has exited; these connect at once (the supervisor's socket
        # still listens) and are answered by the servers started after it.
        second, third = _ask(port), _ask(port)
        assert len({first, second, third}) == 3, (first, second, third)
    finally:
        supervisor.stop(signal.SIGTERM)
        runner.join(30)
    assert not runner.is_alive()
    with socket.socket() as again:
        # Bindable again (SO_REUSEADDR passes over TIME_WAIT, never over a listener): the
        # supervisor let its socket go.
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
