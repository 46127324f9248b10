"""Host uid ranges: each live sandbox, on any runtime, owns 65536 host uids of its own.

Why: uid 0 inside a sandbox must never be host uid 0, and per-user kernel limits (inotify
instances and watches, processes, message queues, keys) are counted per host uid and per
owner of a user namespace. A sandbox whose ids map to a range nobody else uses (not the host's
users, not another sandbox) cannot exhaust a neighbour's or the host's share.

Slot ``n`` owns host uids ``UID_BASE + n * UIDS_PER_SANDBOX`` onwards; sandbox uid ``k`` is
host uid ``base + k``. Claims are host-wide files created with ``O_EXCL`` under ``/run`` (one
per live sandbox, of any Sandgate instance and either runtime), so two gateways on one host
never hand out the same range.

Trust: only root writes here; nothing of a sandbox is ever mounted from this directory.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from sandgate.errors import RuntimeUnavailable

__all__ = [
    "RUNTIME_DIR",
    "UIDS_PER_SANDBOX",
    "UID_BASE",
    "claim_slot",
    "release_slot",
    "uid_base",
]

#: First host uid given to sandboxes: far above any host account (Debian allocates below
#: 60000; systemd's dynamic users and container ranges stay below 2**31 - 2**30).
UID_BASE = 1_000_000_000
UIDS_PER_SANDBOX = 65536
_MAX_SLOTS = 16384  # keeps every mapped id below 2**31
#: Host-wide state of Sandgate's runtimes (tmpfs on most hosts: gone after a reboot, as are
#: the sandboxes it describes).
RUNTIME_DIR = Path("/run/sandgate-rt")
_CLAIMS_DIR = RUNTIME_DIR / "uids"


def uid_base(slot: int) -> int:
    return UID_BASE + slot * UIDS_PER_SANDBOX


def claim_slot(owner: Path) -> int:
    """The lowest free slot, claimed host-wide for ``owner`` (a directory that exists while
    the sandbox does, e.g. its state or stage directory).

    A claim whose owner directory is gone and whose uids run no process is stale (its
    gateway's home was deleted, or the host crashed mid-kill) and is taken over.
    """
    _CLAIMS_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
    taken = {int(p.name) for p in _CLAIMS_DIR.iterdir() if p.name.isdigit()}
    record = json.dumps({"owner": str(owner)}).encode()
    running: set[int] | None = None  # slots whose uids run a process; read once, when needed
    for slot in range(_MAX_SLOTS):
        claim = _CLAIMS_DIR / str(slot)
        if slot in taken:
            if not _orphaned(claim):
                continue
            if running is None:
                running = _running_slots()
            if slot in running:
                continue
            with contextlib.suppress(FileNotFoundError):
                claim.unlink()
        try:
            fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        try:
            os.write(fd, record)
        finally:
            os.close(fd)
        return slot
    raise RuntimeUnavailable(f"all {_MAX_SLOTS} sandbox uid ranges are in use on this host")


def release_slot(slot: int, owner: Path) -> None:
    """Gives ``slot`` back if ``owner`` still holds it; idempotent."""
    claim = _CLAIMS_DIR / str(slot)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        if Path(json.loads(claim.read_text())["owner"]) == owner:
            claim.unlink()


def _orphaned(claim: Path) -> bool:
    """Whether a claim's owner directory is gone (a stale claim, unless its uids still run a
    process: ``_running_slots``)."""
    try:
        owner = Path(json.loads(claim.read_text())["owner"])
    except (OSError, ValueError, KeyError, TypeError):
        return False  # being written right now, or unreadable: leave it alone
    return not owner.is_dir()


def _running_slots() -> set[int]:
    """The slots whose uid range owns a process right now: one walk of ``/proc`` for a whole
    claim, not one per orphaned claim (a host with many orphaned claims, e.g. homes deleted
    under live sandboxes, paid a walk per claim per create, in every create of a burst)."""
    slots: set[int] = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                uid = proc.stat().st_uid
                if uid >= UID_BASE:
                    slots.add((uid - UID_BASE) // UIDS_PER_SANDBOX)
    return slots
