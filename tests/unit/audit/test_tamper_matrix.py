"""The tamper matrix: every kind of tampering is found, and named at its first bad record.

A log of six records (a real file, a real SQLite index) is damaged the way an intruder with
shell access would; ``verify`` must say which record is the first bad one, a fresh writer
(a restarted gateway) must refuse to append, naming it, and nothing may crash on the way
(the old failure: a UNIQUE constraint error on the index and "intact" afterwards).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sandgate.audit import AuditLog, AuditState, Checkpointer, canonical, seal
from sandgate.errors import AuditTampered, Conflict
from sandgate.store import Store

KEY = b"checkpoint-test-key"


def build(home: Path, *, checkpoint: bool = False) -> AuditLog:
    store = Store.open(f"sqlite:///{home / 'db.sqlite'}")
    checkpointer = None
    if checkpoint:
        checkpointer = Checkpointer(home / "anchor" / "audit.anchor", KEY, 1, 3600)
    return AuditLog(home / "audit", store, checkpoint=checkpointer)


def fill(log: AuditLog, count: int) -> None:
    for n in range(count):
        log.append({"event": "tool.call", "tool": "kv", "outcome": "allowed", "n": n})


def lines(log: AuditLog) -> list[str]:
    return log.path.read_text().splitlines()


def rewrite(log: AuditLog, content: list[str]) -> None:
    log.path.write_text("".join(line + "\n" for line in content))


def records(log: AuditLog) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines(log)]


def edit(log: AuditLog) -> None:
    content = lines(log)
    record = json.loads(content[2])
    record["outcome"] = "denied"
    content[2] = canonical(record)
    rewrite(log, content)


def delete(log: AuditLog) -> None:
    content = lines(log)
    del content[2]
    rewrite(log, content)


def reorder(log: AuditLog) -> None:
    content = lines(log)
    content[2], content[3] = content[3], content[2]
    rewrite(log, content)


def truncate(log: AuditLog) -> None:
    rewrite(log, lines(log)[:4])


def truncate_then_append(log: AuditLog) -> None:
    """Cut records 5 and 6, then write a record 5 of one's own that chains perfectly."""
    kept = records(log)[:4]
    forged = seal(
        {"time": kept[-1]["time"], "event": "tool.call", "tool": "kv", "outcome": "denied"},
        5,
        kept[-1]["hash"],
    )
    rewrite(log, [canonical(r) for r in [*kept, forged]])


def recompute(log: AuditLog) -> None:
    """Edit record 3 and recompute every hash after it: the chain is whole again."""
    chain = records(log)
    prev = chain[1]["hash"]
    out = [canonical(r) for r in chain[:2]]
    for record in chain[2:]:
        body = {k: v for k, v in record.items() if k not in ("hash", "seq", "prev")}
        if record["seq"] == 3:
            body["outcome"] = "denied"
        sealed = seal(body, record["seq"], prev)
        prev = sealed["hash"]
        out.append(canonical(sealed))
    rewrite(log, out)


MATRIX: list[tuple[str, Callable[[AuditLog], None], int, str]] = [
    ("edit", edit, 3, "record 3 (line 3) was modified"),
    ("delete", delete, 3, "record 3 is missing: line 3 holds record 4"),
    ("reorder", reorder, 3, "record 3 is missing: line 3 holds record 4"),
    ("truncate", truncate, 5, "records 5..6 are missing from the end of the log"),
    ("truncate_then_append", truncate_then_append, 5, "record 5 (line 5) is not the record"),
    ("recomputed_chain", recompute, 3, "record 3 (line 3) is not the record the store anchored"),
]


@pytest.mark.parametrize(
    ("kind", "damage", "first_bad", "says"), MATRIX, ids=[m[0] for m in MATRIX]
)
def test_tamper_matrix_names_the_first_bad_record(
    tmp_path: Path, kind: str, damage: Callable[[AuditLog], None], first_bad: int, says: str
) -> None:
    log = build(tmp_path)
    fill(log, 6)
    log.close()
    damage(log)

    result = log.verify()
    assert not result.ok and result.first_bad == first_bad, result
    assert says in (result.problem or ""), result.problem

    restarted = build(tmp_path)  # a gateway starting on the damaged log
    health = restarted.check_head(full=True)
    assert health.state is AuditState.TAMPERED and health.first_bad == first_bad
    with pytest.raises(AuditTampered) as refused:
        restarted.append({"event": "tool.call", "outcome": "allowed"})
    assert f"first bad record: {first_bad}" in refused.value.message
    assert refused.value.code == "audit_tampered" and refused.value.status == 503
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert store.audit_head() is not None and store.audit_head()[0] == 6  # nothing appended


def test_rollback_of_log_and_store_together_is_caught_by_the_signed_checkpoint(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    log = build(home, checkpoint=True)
    fill(log, 4)
    log.close()
    saved = tmp_path / "saved"
    shutil.copytree(home, saved, ignore=shutil.ignore_patterns("anchor"))
    fill(log, 2)
    log.close()
    # Put back the older copies of both the log and the database: only the checkpoint,
    # kept elsewhere, still knows record 6 existed.
    shutil.rmtree(home / "audit")
    shutil.copytree(saved / "audit", home / "audit")
    for name in ("db.sqlite", "db.sqlite-wal", "db.sqlite-shm"):
        (home / name).unlink(missing_ok=True)
        if (saved / name).exists():
            shutil.copy(saved / name, home / name)

    restarted = build(home, checkpoint=True)
    result = restarted.verify()
    assert not result.ok and result.first_bad == 5
    assert "signed checkpoint" in (result.problem or "")
    assert restarted.check_head().state is AuditState.TAMPERED
    with pytest.raises(AuditTampered):
        restarted.append({"event": "tool.call"})


def test_a_forged_checkpoint_is_refused(tmp_path: Path) -> None:
    log = build(tmp_path, checkpoint=True)
    fill(log, 3)
    log.close()
    anchor = tmp_path / "anchor" / "audit.anchor"
    lines_ = anchor.read_text().splitlines()
    forged = json.loads(lines_[-1])
    forged["seq"] = 99
    anchor.write_text("\n".join([*lines_, json.dumps(forged)]) + "\n")
    result = build(tmp_path, checkpoint=True).verify()
    assert not result.ok and "is not a checkpoint signed" in (result.problem or "")
    assert build(tmp_path, checkpoint=True).check_head().state is AuditState.TAMPERED


def test_records_a_crash_left_unindexed_are_indexed_not_refused(tmp_path: Path) -> None:
    log = build(tmp_path)
    fill(log, 3)
    log.close()
    last = records(log)[-1]
    # What a crash after the fsync and before the index leaves: a record the store lacks.
    body = {"time": last["time"], "event": "tool.call", "outcome": "allowed"}
    orphan = seal(body, 4, last["hash"])
    with log.path.open("a") as handle:
        handle.write(canonical(orphan) + "\n")
    restarted = build(tmp_path)
    assert restarted.check_head(full=True).state is AuditState.OK
    restarted.append({"event": "tool.call", "outcome": "allowed"})
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert store.audit_hashes(4, 5)[4] == orphan["hash"] and store.audit_head()[0] == 5
    assert restarted.verify().ok


def test_recover_starts_a_new_log_that_continues_the_anchor(tmp_path: Path) -> None:
    log = build(tmp_path)
    fill(log, 6)
    log.close()
    truncate(log)
    with pytest.raises(AuditTampered):
        log.append({"event": "tool.call"})
    damaged_bytes = log.path.read_bytes()

    record = log.recover(by="test")
    assert record["seq"] == 7 and record["event"] == "audit.recovered"
    assert record["first_bad_record"] == 5
    damaged = tmp_path / "audit" / record["damaged_file"]
    assert damaged.read_bytes() == damaged_bytes
    assert record["damaged_sha256"] == hashlib.sha256(damaged_bytes).hexdigest()
    log.append({"event": "tool.call", "outcome": "allowed"})
    result = log.verify()
    assert result.ok and result.checked == 2
    assert any("restarts at record 7" in note for note in result.notes)
    with pytest.raises(Conflict):
        log.recover(by="test")  # nothing to recover any more


def test_group_commit_many_callers_share_fsyncs_and_keep_the_chain(tmp_path: Path) -> None:
    log = build(tmp_path)
    futures = [log.submit({"event": "tool.call", "n": n}) for n in range(300)]
    sealed = [future.result(timeout=60) for future in futures]
    assert [r["seq"] for r in sealed] == list(range(1, 301))
    assert log.records_written == 300 and log.batches < 300
    assert log.verify().ok
