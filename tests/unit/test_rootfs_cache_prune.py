"""The test suite's tree cache pruning (tests/fixtures/rootfs_cache.py): what goes, what stays."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.fixtures.rootfs_cache import prune


def _tree(cache: Path, name: str, age_s: float) -> Path:
    tree = cache / name
    (tree / "etc").mkdir(parents=True)
    meta = cache / f"{name}.json"
    meta.write_text("{}")
    stamp = time.time() - age_s
    for path in (tree, meta):
        os.utime(path, (stamp, stamp))
    return tree


def test_prune_removes_old_unkept_trees_only(tmp_path: Path) -> None:
    old = _tree(tmp_path, "a" * 64, 7200)
    kept = _tree(tmp_path, "b" * 64, 7200)
    fresh = _tree(tmp_path, "c" * 64, 10)
    (tmp_path / "by-name" / "manual").mkdir(parents=True)
    removed = prune(tmp_path, {kept.name}, 3600)
    assert removed == [old.name]
    assert not old.exists() and not (tmp_path / f"{old.name}.json").exists()
    assert kept.is_dir() and fresh.is_dir() and (tmp_path / "by-name" / "manual").is_dir()
