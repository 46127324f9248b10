"""write_atomic: the one "temp file, fsync, rename" of the gateway's small records."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from sandgate._atomic import write_atomic


def test_replaces_whole_with_the_mode_asked_whatever_the_umask(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    old = os.umask(0o077)
    try:
        write_atomic(target, '{"new": 1}', mode=0o644)
    finally:
        os.umask(old)
    assert target.read_text() == '{"new": 1}'
    assert target.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_never_writes_through_a_planted_symlink(tmp_path: Path) -> None:
    """FILE-04's class: a link planted where the record goes is replaced, its target kept."""
    outside = tmp_path / "outside"
    outside.write_text("keep")
    box = tmp_path / "box"
    box.mkdir()
    (box / "hosts").symlink_to(outside)
    write_atomic(box / "hosts", b"127.0.0.1 sandbox\n", durable=False)
    assert outside.read_text() == "keep"
    assert not (box / "hosts").is_symlink()
    assert (box / "hosts").read_bytes() == b"127.0.0.1 sandbox\n"


def test_concurrent_writers_of_one_path_each_finish(tmp_path: Path) -> None:
    target = tmp_path / "meta.json"
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for _ in range(50):
                write_atomic(target, str(n) * 1000, durable=False)
        except BaseException as exc:  # pragma: no cover - the assertion reports it
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    content = target.read_text()
    assert len(content) == 1000 and len(set(content)) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["meta.json"]


def test_a_failed_write_leaves_the_old_record_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "approval.json"
    target.write_text("old")

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["approval.json"]
