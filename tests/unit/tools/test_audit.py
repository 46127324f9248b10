"""The audit chain: every edit, removal, reordering or truncation is found."""

import json
from pathlib import Path

import pytest

from sandgate.audit import AuditLog
from sandgate.store import Store


@pytest.fixture
def log(tmp_path: Path) -> AuditLog:
    store = Store.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    audit = AuditLog(tmp_path / "audit", store)
    for n in range(5):
        audit.append(
            {"event": "tool.call", "tool": "kv", "action": "get", "outcome": "allowed", "n": n}
        )
    return audit


def lines(log: AuditLog) -> list[str]:
    return log.path.read_text().splitlines()


def rewrite(log: AuditLog, new: list[str]) -> None:
    log.path.write_text("\n".join(new) + "\n")


def test_intact_log_verifies(log: AuditLog) -> None:
    result = log.verify()
    assert result.ok and result.checked == 5
    assert [r["seq"] for r in log.records()] == [1, 2, 3, 4, 5]


def test_edited_record_is_detected(log: AuditLog) -> None:
    content = lines(log)
    record = json.loads(content[2])
    record["outcome"] = "denied"
    content[2] = json.dumps(record)
    rewrite(log, content)
    result = log.verify()
    assert not result.ok and result.checked == 2
    assert "record 3" in (result.problem or "") and "modified" in (result.problem or "")


def test_removed_record_is_detected(log: AuditLog) -> None:
    content = lines(log)
    del content[1]
    rewrite(log, content)
    result = log.verify()
    assert not result.ok and result.bad_line == 2


def test_reordered_records_are_detected(log: AuditLog) -> None:
    content = lines(log)
    content[1], content[2] = content[2], content[1]
    rewrite(log, content)
    assert not log.verify().ok


def test_truncated_tail_is_detected_by_the_index(log: AuditLog) -> None:
    rewrite(log, lines(log)[:3])
    result = log.verify()
    assert not result.ok and "truncated" in (result.problem or "")


def test_GW_10_injected_newlines_and_ansi_stay_one_escaped_record(log: AuditLog) -> None:
    log.append(
        {"event": "tool.call", "tool": 'x\n{"decision":"allow"}\x1b[2J', "outcome": "denied"}
    )
    content = lines(log)
    assert len(content) == 6
    assert "\x1b" not in content[-1] and "\\n" in content[-1]
    assert log.verify().ok


def test_appends_continue_the_chain_after_reopening(log: AuditLog, tmp_path: Path) -> None:
    again = AuditLog(tmp_path / "audit", None)
    again.append({"event": "tool.call", "outcome": "allowed"})
    assert [r["seq"] for r in again.records()][-1] == 6
    assert again.verify().ok


def test_concurrent_appends_keep_the_chain_and_are_all_durable(tmp_path: Path) -> None:
    import threading

    log = AuditLog(tmp_path / "audit", None)
    threads = [
        threading.Thread(target=lambda: [log.append({"n": i}) for i in range(50)]) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = log.verify()
    assert result.ok and result.checked == 400
    assert log.records_written == 400 and log.batches <= 400
    seqs = [record["seq"] for record in log.records()]
    assert seqs == list(range(1, 401))
