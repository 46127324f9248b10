"""Fixtures: a real guest daemon (from the built zipapp) on a temp socket, run as root."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from sandgate.guest import build_zipapp
from sandgate.guest.client import GuestClient

TEST_USER = f"sgguest{os.getpid()}"


@dataclass
class RunningGuest:
    process: subprocess.Popen[bytes]
    socket_path: Path
    workdir: Path
    log: list[str] = field(default_factory=list)
    logged: threading.Condition = field(default_factory=threading.Condition)

    def wait_event(self, event: str, start: int = 0, timeout: float = 30.0) -> dict[str, Any]:
        """The first log record named ``event`` at index ``start`` or later, waiting for the
        daemon to write it (the log is how the daemon says it did something asynchronous)."""
        found: dict[str, Any] | None = None

        def seen() -> bool:
            nonlocal found
            for line in self.log[start:]:
                record = json.loads(line)
                if record.get("event") == event:
                    found = record
                    return True
            return False

        with self.logged:
            if not self.logged.wait_for(seen, timeout):
                raise AssertionError(f"the guest never logged {event!r}: {self.log[start:]}")
        assert found is not None
        return found

    @property
    def client(self) -> GuestClient:
        return GuestClient(self.socket_path)

    @property
    def pid(self) -> int:
        return self.process.pid


@pytest.fixture(scope="session")
def guest_pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_zipapp(tmp_path_factory.mktemp("pyz") / "guest.pyz")


def _start(
    pyz: Path, workdir: Path, config: dict[str, Any], prefix: tuple[str, ...] = ()
) -> RunningGuest:
    workdir.mkdir(parents=True, exist_ok=True)
    config_path = workdir / "guest.json"
    config_path.write_text(json.dumps(config))
    socket_path = workdir / "guest.sock"
    process = subprocess.Popen(
        [
            *prefix,
            sys.executable,
            "-I",
            str(pyz),
            "--socket",
            str(socket_path),
            "--config",
            str(config_path),
        ],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    guest = RunningGuest(process, socket_path, workdir)
    assert process.stderr is not None
    # The daemon logs "started" only after the socket is renamed into place.
    for raw in process.stderr:
        line = raw.decode()
        guest.log.append(line)
        if json.loads(line).get("event") == "started":
            break
    else:
        raise RuntimeError(f"guest did not start: {guest.log}")
    stderr = process.stderr

    def follow() -> None:
        for raw in stderr:
            with guest.logged:
                guest.log.append(raw.decode())
                guest.logged.notify_all()

    threading.Thread(target=follow, daemon=True).start()
    return guest


def _stop(guest: RunningGuest) -> None:
    guest.process.terminate()
    try:
        guest.process.wait(10)
    except subprocess.TimeoutExpired:
        guest.process.kill()
        guest.process.wait()


@pytest.fixture(scope="session")
def sandbox_envs() -> dict[str, str]:
    return {"SBX_ONLY": "sandbox", "SBX_OVERRIDE": "sandbox"}


@pytest.fixture(scope="session")
def guest(
    guest_pyz: Path,
    tmp_path_factory: pytest.TempPathFactory,
    sandbox_envs: dict[str, str],
    test_user: pwd.struct_passwd,  # created first, so it is removed after the daemon stopped
) -> Iterator[RunningGuest]:
    running = _start(
        guest_pyz,
        tmp_path_factory.mktemp("guest"),
        {"envs": sandbox_envs, "default_user": "root", "exit_retention_s": 30},
    )
    yield running
    _stop(running)


@pytest.fixture
def start_guest(
    guest_pyz: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[dict[str, Any]], RunningGuest]]:
    started: list[RunningGuest] = []

    def start(config: dict[str, Any], prefix: tuple[str, ...] = ()) -> RunningGuest:
        """``prefix`` runs before the interpreter (e.g. ``capsh`` raising capabilities)."""
        running = _start(guest_pyz, tmp_path_factory.mktemp("guest"), config, prefix)
        started.append(running)
        return running

    yield start
    for running in started:
        _stop(running)


@pytest.fixture(scope="session")
def test_user() -> Iterator[pwd.struct_passwd]:
    """A throwaway Linux user (created with useradd, removed afterwards)."""
    subprocess.run(["userdel", "-r", TEST_USER], capture_output=True, check=False)
    subprocess.run(["useradd", "-m", "-s", "/bin/sh", TEST_USER], check=True)
    try:
        yield pwd.getpwnam(TEST_USER)
    finally:
        subprocess.run(["userdel", "-f", "-r", TEST_USER], capture_output=True, check=False)


@pytest.fixture
def workdir(guest: RunningGuest, tmp_path: Path) -> Path:
    os.chmod(tmp_path, 0o755)
    return tmp_path
