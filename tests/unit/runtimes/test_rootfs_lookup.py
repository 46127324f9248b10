"""Finding a template's tree (``runtimes/_rootfs.resolve_rootfs``) by the image id on record,
without asking the engine, and falling back to the engine whenever that id has no complete
tree here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes._rootfs import Rootfs, resolve_rootfs

#: An engine address nothing answers at: any question to the engine fails, and says so.
NO_ENGINE = "unix:///nonexistent/sandgate-test/docker.sock"
IMAGE_ID = "ab" * 32


def _exported(cache: Path, image_id: str, *, tree: bool = True, record: bool = True) -> None:
    if tree:
        (cache / image_id).mkdir(parents=True)
    if record:
        meta = {"env": {"PATH": "/opt/bin"}, "workdir": "/work", "layers": ["sha256:1"]}
        (cache / f"{image_id}.json").write_text(json.dumps(meta))


def test_a_recorded_image_id_finds_its_tree_without_the_engine(tmp_path: Path) -> None:
    _exported(tmp_path, IMAGE_ID)
    found = resolve_rootfs("sandgate/template-x:abc", tmp_path, NO_ENGINE, f"sha256:{IMAGE_ID}")
    assert found == Rootfs(tmp_path / IMAGE_ID, {"PATH": "/opt/bin"}, "/work")


@pytest.mark.parametrize(
    ("image_id", "tree", "record"),
    [
        ("", True, True),  # no id on record (a snapshot's image)
        (f"sha256:{'cd' * 32}", True, True),  # another image's tree is here, not this one's
        (f"sha256:{IMAGE_ID}", True, False),  # an export cut short: the record is written last
        (f"sha256:{IMAGE_ID}", False, True),  # a record whose tree was removed
        ("../" + IMAGE_ID, True, True),  # not an id: never a path out of the cache
    ],
)
def test_without_a_complete_tree_for_the_id_the_engine_is_asked(
    tmp_path: Path, image_id: str, tree: bool, record: bool
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    _exported(cache, IMAGE_ID, tree=tree, record=record)
    _exported(tmp_path, IMAGE_ID)  # beside the cache: what "../<id>" would name
    with pytest.raises(RuntimeUnavailable, match="no Docker engine answers"):
        resolve_rootfs("sandgate/template-x:abc", cache, NO_ENGINE, image_id)
