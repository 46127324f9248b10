"""The per-user file worker's life: started by the first file operation, retired when idle,
and never losing an operation to its retirement. An idle sandbox is then one process."""

from __future__ import annotations

import hashlib
import os
import pwd
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandgate.guest._config import GuestConfig
from sandgate.guest._files import FILE_OPS
from sandgate.guest.client import GuestUnavailable
from sandgate.guest.protocol import FILE_OP_NAMES

from .conftest import RunningGuest
from .helpers import run

pytestmark = pytest.mark.timeout(60)

StartGuest = Callable[[dict[str, Any]], RunningGuest]


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(child) for child in f.read().split()]


def test_the_daemon_routes_exactly_the_file_operations_to_workers() -> None:
    assert frozenset(FILE_OPS) == FILE_OP_NAMES


def test_worker_idle_s_is_validated() -> None:
    assert GuestConfig.from_json({}).worker_idle_s == 30.0
    assert GuestConfig.from_json({"worker_idle_s": 2}).worker_idle_s == 2.0
    for bad in (0, -1, True, "30", 86401):
        with pytest.raises(ValueError, match="worker_idle_s"):
            GuestConfig.from_json({"worker_idle_s": bad})


def test_an_idle_guest_is_one_process_until_a_file_operation(
    start_guest: StartGuest, test_user: pwd.struct_passwd
) -> None:
    """No worker at start (a ping and a command need none); the first file operation starts
    the user's worker, and it is retired after ``worker_idle_s`` without a request; the next
    operation starts a new one."""
    guest = start_guest({"default_user": test_user.pw_name, "worker_idle_s": 0.5})
    assert run(guest.client.ping())["ok"]
    assert _children(guest.pid) == []
    mark = len(guest.log)
    entry = run(guest.client.stat("~"))
    assert entry.path == test_user.pw_dir
    started = guest.wait_event("worker_started", mark)
    assert _children(guest.pid) == [started["pid"]]
    guest.wait_event("worker_idle", mark)
    exited = guest.wait_event("worker_exited", mark)
    assert exited["status"] == 0
    assert _children(guest.pid) == []
    mark = len(guest.log)
    assert run(guest.client.stat("~")).path == test_user.pw_dir
    again = guest.wait_event("worker_started", mark)
    assert again["pid"] != started["pid"]


def test_a_retired_worker_finishes_the_operation_it_runs(
    start_guest: StartGuest, tmp_path: Path
) -> None:
    """A download still being read when the worker is retired arrives whole: retiring only
    closes the control socket, and the worker exits after its operations end."""
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(1024 * 1024) * 32)
    guest = start_guest({"default_user": "root", "worker_idle_s": 0.3})

    async def body() -> None:
        mark = len(guest.log)
        # 32 MiB cannot fit the socket buffers: the worker's thread is blocked sending.
        reader = await guest.client.read_file(str(big))
        guest.wait_event("worker_idle", mark)
        assert guest.process.poll() is None
        digest = hashlib.sha256()
        async for chunk in reader:
            digest.update(chunk)
        assert digest.hexdigest() == hashlib.sha256(big.read_bytes()).hexdigest()
        assert guest.wait_event("worker_exited", mark)["status"] == 0

    run(body())


def test_a_stopped_retired_worker_is_still_killed(start_guest: StartGuest, tmp_path: Path) -> None:
    """SECURITY: a worker sandbox code stops after its retirement (it may still be finishing
    a download) is killed like a live one, never left holding a client."""
    big = tmp_path / "big.bin"
    big.write_bytes(b"x" * (16 * 1024 * 1024))
    guest = start_guest({"default_user": "root", "worker_idle_s": 0.3})

    async def body() -> None:
        mark = len(guest.log)
        reader = await guest.client.read_file(str(big))
        pid = guest.wait_event("worker_started", mark)["pid"]
        guest.wait_event("worker_idle", mark)
        os.kill(pid, 19)  # SIGSTOP, as sandbox code running as the user could
        guest.wait_event("worker_stopped", mark)
        exited = guest.wait_event("worker_exited", mark)
        assert os.WIFSIGNALED(exited["status"]) and os.WTERMSIG(exited["status"]) == 9
        with pytest.raises(GuestUnavailable):  # the stream is cut before its end
            async for _ in reader:
                pass
        # The user's next file operation gets a new worker.
        assert (await guest.client.stat("/")).path == "/"

    run(body())
