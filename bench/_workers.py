"""Runs a benchmark's SDK worker (``bench/workers/``) against a server, with a pinned client's
interpreter: the worker measures from the client's side and prints its samples as the last
line of JSON on stdout."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.compat.clients import CLIENTS, PreparedClient, prepare

from bench._report import ROOT

WORKERS = ROOT / "bench" / "workers"
#: The official Python SDK the benches drive Sandgate with (one of ``tests/compat``'s pins).
PINNED_SDK = "py-e2b-2.63.0"


def pinned_sdk() -> PreparedClient:
    """``PINNED_SDK``'s environment, installed on first use and reused after."""
    return prepare(next(client for client in CLIENTS if client.name == PINNED_SDK))


def run_sdk_worker(
    python: Path, worker: str, args: list[object], server_env: Mapping[str, str]
) -> dict[str, Any]:
    """``server_env`` is what ``sandgate env`` prints for the server (the E2B variables); the
    worker gets that and a minimal PATH only, as a user's SDK process would."""
    proc = subprocess.run(
        [str(python), str(WORKERS / worker), *map(str, args)],
        env={**server_env, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"the SDK worker {worker} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
