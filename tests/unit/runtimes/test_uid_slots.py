"""Uid-slot claims (``runtimes/_uids.py``): exclusive under a burst of concurrent claims, an
orphaned claim (owner directory gone) is taken over only when no process runs in its range.
The claims directory is redirected to a temporary one, and the uid ranges above every real
sandbox's (``UID_BASE`` moved past the last real slot), so no other sandbox on the host can
change the outcome and none is touched."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgate.runtimes import _uids
from sandgate.runtimes._uids import claim_slot, release_slot, uid_base


@pytest.fixture
def claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    directory = tmp_path / "uids"
    monkeypatch.setattr(_uids, "_CLAIMS_DIR", directory)
    # Real ranges end at 1_000_000_000 + 16384 * 65536 = 2_073_741_824.
    monkeypatch.setattr(_uids, "UID_BASE", 2_100_000_000)
    yield directory


def _claim(claims: Path, slot: int, owner: Path) -> None:
    claims.mkdir(parents=True, exist_ok=True)
    (claims / str(slot)).write_text(json.dumps({"owner": str(owner)}))


def test_twenty_concurrent_claims_get_twenty_different_slots(claims: Path, tmp_path: Path) -> None:
    owners = [tmp_path / f"o{i}" for i in range(20)]
    for owner in owners:
        owner.mkdir()
    held: dict[Path, int] = {}
    barrier = threading.Barrier(len(owners))

    def one(owner: Path) -> None:
        barrier.wait()
        held[owner] = claim_slot(owner)

    threads = [threading.Thread(target=one, args=(o,)) for o in owners]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(held.values()) == list(range(20))
    # Which owner wins which slot is the race's to decide: release by what each one holds.
    first, other = owners[0], owners[1]
    release_slot(held[other], first)  # not its slot: kept
    assert (claims / str(held[other])).exists()
    release_slot(held[first], first)  # its own: given back
    assert not (claims / str(held[first])).exists()


def test_an_orphaned_claim_is_taken_over_unless_its_uids_run_a_process(
    claims: Path, tmp_path: Path
) -> None:
    live = tmp_path / "live"
    live.mkdir()
    gone = tmp_path / "gone"  # never created: its gateway home was deleted
    _claim(claims, 0, gone)  # orphaned, a process runs as its range's uid: kept
    _claim(claims, 1, live)  # held
    _claim(claims, 2, gone)  # orphaned and idle: stale
    uid = uid_base(0) + 5
    sleeper = subprocess.Popen(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--",
         "sh", "-c", "echo dropped; exec sleep 60"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert sleeper.stdout is not None
    assert sleeper.stdout.readline() == b"dropped\n"  # it runs as the range's uid now
    try:
        me = tmp_path / "me"
        me.mkdir()
        assert claim_slot(me) == 2
        assert json.loads((claims / "2").read_text()) == {"owner": str(me)}
        assert json.loads((claims / "0").read_text()) == {"owner": str(gone)}
    finally:
        sleeper.kill()
        sleeper.wait()
        sleeper.stdout.close()
    other = tmp_path / "other"
    other.mkdir()
    assert claim_slot(other) == 0, "once nothing runs in its range, the orphan is stale"
