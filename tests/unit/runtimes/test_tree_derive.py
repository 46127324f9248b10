"""When a tree cannot be derived from its layers, ``derive_tree`` says so and leaves nothing
behind, so the caller exports the image whole (tests/integration/test_rootfs_derive.py proves
a derived tree equals an export)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sandgate.runtimes._tree_derive import apply_layer, derive_tree, layer_dirs


def _attrs(upper: Path, lowers: list[Path], layers: int, driver: str = "overlay2") -> dict:
    data = {"UpperDir": str(upper)}
    if lowers:
        data["LowerDir"] = ":".join(str(p) for p in lowers)
    return {"GraphDriver": {"Name": driver, "Data": data}, "RootFS": {"Layers": ["x"] * layers}}


def test_layer_dirs_are_bottom_first_and_only_for_readable_overlay2(tmp_path: Path) -> None:
    top, mid, bottom = (tmp_path / name for name in ("top", "mid", "bottom"))
    for path in (top, mid, bottom):
        path.mkdir()
    assert layer_dirs(_attrs(top, [mid, bottom], 3)) == [bottom, mid, top]
    assert layer_dirs(_attrs(top, [mid, bottom], 2)) is None  # counts disagree
    assert layer_dirs(_attrs(top, [mid, bottom], 3, driver="btrfs")) is None
    assert layer_dirs(_attrs(tmp_path / "missing", [mid, bottom], 3)) is None


def test_a_renamed_directory_layer_is_refused_and_leaves_nothing(tmp_path: Path) -> None:
    ancestor = tmp_path / "ancestor"
    (ancestor / "etc").mkdir(parents=True)
    (ancestor / "etc" / "kept").write_text("kept\n")
    layer = tmp_path / "layer"
    (layer / "moved").mkdir(parents=True)
    os.setxattr(layer / "moved", "trusted.overlay.redirect", b"/etc")
    target = tmp_path / "cache" / "tree"
    target.parent.mkdir()
    assert derive_tree(ancestor, [layer], target) is False
    assert list(target.parent.iterdir()) == []
    assert (ancestor / "etc" / "kept").read_text() == "kept\n"


def test_whiteouts_and_opaque_directories_replay_without_touching_shared_inodes(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    (tree / "d").mkdir(parents=True)
    (tree / "d" / "old").write_text("old\n")
    (tree / "gone").write_text("gone\n")
    (tree / "f").write_text("f\n")
    shared = tmp_path / "shared"
    os.link(tree / "f", shared)  # as a hard-linked copy of an ancestor shares inodes
    layer = tmp_path / "layer"
    (layer / "d").mkdir(parents=True)
    os.setxattr(layer / "d", "trusted.overlay.opaque", b"y")
    (layer / "d" / "new").write_text("new\n")
    os.mknod(layer / "gone", stat.S_IFCHR | 0o600, 0)
    (layer / "f").write_text("changed\n")
    apply_layer(layer, tree)
    assert sorted(p.name for p in (tree / "d").iterdir()) == ["new"]
    assert not (tree / "gone").exists()
    assert (tree / "f").read_text() == "changed\n"
    assert shared.read_text() == "f\n"  # replaced by name, never written through
    assert "trusted.overlay.opaque" not in os.listxattr(tree / "d")
