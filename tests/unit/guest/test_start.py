"""What the daemon costs before it answers: its command line, and the modules it imports.

Every sandbox's start pays the guest's imports, so the modules only rare requests need (file
operations, which run in the forked worker; the egress relay; argument parsing; ctypes)
must stay out of the daemon's start; this guards that as the guest grows.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sandgate.guest.daemon import _parse_args
from sandgate.runtimes.base import GUEST_BOOT

from .helpers import probe_guest_pyz

#: Imported by the worker or by rare requests only, never by the daemon's start.
_NOT_AT_START = (
    "argparse",
    "ctypes",
    "tempfile",
    "shutil",
    "zipfile",
    "sandgate.guest._files",
    "sandgate.guest._worker",
    "sandgate.guest._inotify",
    "sandgate.guest._egress",
    "sandgate.guest._dirs",
    # The daemon runs on its own selector loop (``_loop``): asyncio alone was most of the
    # guest's start-up, and it brings concurrent.futures, logging and threading with it.
    "asyncio",
    "concurrent",
    "logging",
    "threading",
    # Plain classes instead of dataclasses (which import inspect, ast, dis), and types only
    # under TYPE_CHECKING: each is memory and milliseconds every idle sandbox pays.
    "dataclasses",
    "inspect",
    "typing",
    # Pure-Python stdlib modules the daemon needs only a helper or two from (``_lean``):
    # between them they bring ``enum``, ``re`` and ``functools``, ~12 ms of every start.
    "array",
    "base64",
    "collections",
    "contextlib",
    "enum",
    "functools",
    "json",
    "re",
    "selectors",
    "signal",
    "socket",
    # A shared library (lib-dynload) that only terminals use: loaded by the first PTY.
    "termios",
)


def test_parse_args_accepts_the_runtime_command_line() -> None:
    assert _parse_args(["--listen-fd", "3", "--config", "/g.json"]) == (3, None, "/g.json")
    assert _parse_args(["--config=/g.json", "--socket", "/s"]) == (None, "/s", "/g.json")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--config", "/g.json"], "exactly one of --listen-fd and --socket"),
        (["--listen-fd", "3", "--socket", "/s", "--config", "/g"], "exactly one of"),
        (["--listen-fd", "3"], "--config is required"),
        (["--listen-fd", "x", "--config", "/g"], "file descriptor number"),
        (["--listen-fd", "-1", "--config", "/g"], "file descriptor number"),
        (["--config"], "--config needs a value"),
        (["--config", "/a", "--config", "/b", "--socket", "/s"], "unexpected argument"),
        (["--verbose"], "unexpected argument"),
    ],
)
def test_parse_args_refuses_what_the_runtime_never_writes(argv: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _parse_args(argv)


def test_bad_command_line_exits_2_with_usage(guest_pyz: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-I", str(guest_pyz), "--socket", "/nonexistent/s"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "usage: sandgate-guest" in done.stderr and "--config is required" in done.stderr


def test_daemon_start_imports_no_module_only_rare_requests_need(guest_pyz: Path) -> None:
    """The sandbox's own boot code (``GUEST_BOOT``) up to the daemon's import, then which of
    the rare modules are loaded."""
    boot, found, _ = GUEST_BOOT.partition("from sandgate.guest.daemon import main")
    assert found
    probe = (
        boot + "import sandgate.guest.daemon\n"
        f"print(sorted(m for m in {_NOT_AT_START!r} if m in sys.modules))\n"
    )
    assert probe_guest_pyz(guest_pyz, probe).strip() == "[]"


def test_a_malformed_request_is_refused_by_a_start_that_never_loaded_json(
    guest_pyz: Path,
) -> None:
    """The daemon decodes with ``_json``'s scanner alone; on CPython 3.11 that scanner words
    its errors with a class it expects ``json`` to have loaded already. The first malformed
    document of a daemon must still get ``json``'s own message, not a ``SystemError``."""
    boot, found, _ = GUEST_BOOT.partition("from sandgate.guest.daemon import main")
    assert found
    probe = (
        boot + "import sandgate.guest.daemon\n"
        "from sandgate.guest.protocol import decode_json\n"
        "assert 'json' not in sys.modules\n"
        "for document in (b'{', b'[1', b'{\"a\": tru}', b'\"\\\\x\"'):\n"
        "    try:\n"
        "        decode_json(document)\n"
        "    except ValueError as exc:\n"
        "        print(type(exc).__name__, exc)\n"
    )
    assert probe_guest_pyz(guest_pyz, probe).splitlines() == [
        "StrictJsonError Expecting property name enclosed in double quotes: line 1 column 2 "
        "(char 1)",
        "StrictJsonError Expecting ',' delimiter: line 1 column 3 (char 2)",
        "StrictJsonError Expecting value: line 1 column 7 (char 6)",
        "StrictJsonError Invalid \\escape: line 1 column 2 (char 1)",
    ]
