"""A sandbox that fails to start is removed with its log, so the gateway keeps what its guest
said (``sandbox.not_ready``); ``Runtime.guest_log`` is how it reads it, on every runtime."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sandgate.runtimes.bwrap import BwrapRuntime
from sandgate.runtimes.docker import DockerRuntime
from tests.fixtures.server import RunningServer


def test_guest_log_reads_what_the_guest_wrote(
    runtime: str, runtime_server: RunningServer, runtime_sandbox: dict[str, Any], tmp_path: Path
) -> None:
    reader: BwrapRuntime | DockerRuntime
    if runtime == "bwrap":
        reader = BwrapRuntime("tests", home=runtime_server.home)
    else:
        reader = DockerRuntime("tests", state_dir=tmp_path, rootfs_dir=tmp_path)
    text = asyncio.run(reader.guest_log(runtime_sandbox["sandboxID"]))
    # The guest logs one JSON line when it starts listening.
    assert '"started"' in text
    assert len(asyncio.run(reader.guest_log(runtime_sandbox["sandboxID"], limit=10))) <= 10
    assert asyncio.run(reader.guest_log("nosuchsandbox0000000000")) == ""
