"""The test fixtures fork ``sandgate`` servers and CLI calls from a preloaded interpreter
(tests/fixtures/preforked.py): a forked command must be what a fresh ``python -m sandgate``
would be, or every test that uses the fixtures tests something else than users run."""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.preforked import Preforker, forkable
from tests.fixtures.server import ServerFactory, exec_sandgate


@pytest.fixture(scope="module")
def preforker() -> Iterator[Preforker]:
    forker = Preforker()
    yield forker
    forker.close()


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["--help"], {"COLUMNS": "73"}),  # the console's width comes from the child's environment
        (["policy", "show"], {}),  # a usage error: exit status 2 and its message on stderr
        (["env"], {"SANDGATE_SERVER__PORT": "4321"}),
    ],
    ids=["help", "usage-error", "env"],
)
def test_a_forked_command_prints_and_ends_as_a_fresh_interpreter_does(
    preforker: Preforker, tmp_path: Path, args: list[str], extra: dict[str, str]
) -> None:
    env = {**os.environ, "SANDGATE_HOME": str(tmp_path), "PYTHONUNBUFFERED": "1", **extra}
    fresh = exec_sandgate(args, env)
    forked = preforker.run(args, env=env, timeout=120)
    assert forked.returncode == fresh.returncode
    assert forked.stderr == fresh.stderr
    # `env` makes a new API key each time it runs: the rest of its output must be the same.
    keyless = [line for line in fresh.stdout.splitlines() if "E2B_API_KEY" not in line]
    assert [line for line in forked.stdout.splitlines() if "E2B_API_KEY" not in line] == keyless
    assert forked.stdout.count("\n") == fresh.stdout.count("\n")
    if args == ["env"]:
        assert "export E2B_API_URL=http://127.0.0.1:4321" in forked.stdout


def test_a_forked_server_has_its_own_session_and_reports_how_it_ended(
    preforker: Preforker, tmp_path: Path
) -> None:
    factory = ServerFactory(tmp_path, preforker=preforker)
    try:
        server = factory()
        assert server.process is not None
        pid = server.process.pid
        assert "forked from a preloaded interpreter" in server.log_text()
        assert os.getsid(pid) == pid
        assert Path(f"/proc/{pid}/cwd").resolve() == Path.cwd().resolve()
        assert server.kill() == -signal.SIGKILL
        server.start()  # on the same home and port, as restart-survival tests do
        assert server.process is not None and server.process.pid != pid
        response = httpx.get(f"{server.url}/sandboxes", headers={"X-API-Key": server.api_key})
        assert response.status_code == 200
    finally:
        factory.close()


def test_a_command_that_sets_the_interpreters_own_variables_is_not_forked() -> None:
    assert forkable(dict(os.environ))
    assert not forkable({**os.environ, "PYTHONPATH": "/elsewhere"})
    assert not forkable({**os.environ, "PYTHONHASHSEED": "7"})


def test_a_reused_pid_is_not_taken_for_the_earlier_child_that_had_it() -> None:
    """pid_max is 32768 on the CI machine kind and a suite run starts far more processes: a
    new child may get the pid of one that ended earlier in the same worker."""
    forker = Preforker()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    forker._sock = ours  # the zygote's end is `theirs`: this test speaks for it
    listener = threading.Thread(target=forker._listen, daemon=True)
    listener.start()
    try:
        theirs.send(json.dumps({"exited": 4242, "code": 3}).encode())
        assert forker.exit_code(4242, timeout=10) == 3
        theirs.send(json.dumps({"pid": 4242}).encode())  # a new child with that pid
        assert forker._replies.get(timeout=10) == {"pid": 4242}
        assert forker.exit_code(4242, timeout=0) is None
        theirs.send(json.dumps({"exited": 4242, "code": 0}).encode())
        assert forker.exit_code(4242, timeout=10) == 0
    finally:
        theirs.close()
        listener.join(10)
        ours.close()
