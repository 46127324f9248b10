"""A template tree derived from an exported tree plus the engine's layers is the same tree a full
``docker export`` gives: every path with its type, owner, mode, content, link target, device
number and extended attributes, across the layer changes overlayfs records (whiteouts of files
and directories, opaque directories, type changes, copy-ups, hard links)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from sandgate.runtimes import _rootfs
from sandgate.templates import TemplateBuilder

pytestmark = pytest.mark.docker

#: Two layers on ``base``: the first makes things, the second changes every one of them.
DOCKERFILE = """\
FROM {base}
RUN mkdir -p /opt/d/keep /opt/gone-dir/sub /opt/todir /opt/tosymlink \\
 && echo a > /opt/d/a && echo b > /opt/d/keep/b && echo x > /opt/gone-dir/sub/x \\
 && echo f > /opt/tofile-is-dir && echo 1 > /opt/todir/1 && echo s > /opt/tosymlink/s \\
 && echo link > /opt/hard1 && ln /opt/hard1 /opt/hard2 && mkfifo /opt/fifo \\
 && python3 -c "import os, struct; open('/opt/xattr','w').write('x'); \\
os.setxattr('/opt/xattr', 'security.capability', \\
struct.pack('<5I', 0x02000001, 1 << 13, 0, 0, 0))" \\
 && chown 1000:1000 /opt/d/a && chmod 4750 /opt/d/a
RUN rm -rf /opt/d && mkdir /opt/d && echo new > /opt/d/new \\
 && rm -rf /opt/gone-dir /etc/motd /usr/share/doc \\
 && rm /opt/tofile-is-dir && mkdir /opt/tofile-is-dir \\
 && rm -rf /opt/todir && echo now-a-file > /opt/todir \\
 && rm -rf /opt/tosymlink && ln -s /etc /opt/tosymlink \\
 && echo appended >> /etc/os-release && chmod 700 /root && chown 1000 /opt \\
 && echo second > /opt/hard2 && mkdir -p /var/new/deep && touch /var/new/deep/f \\
 && echo pair > /opt/pair1 && ln /opt/pair1 /opt/pair2
"""


@pytest.fixture
def engine() -> Iterator[Any]:
    client = docker.from_env()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def images(engine: Any) -> Iterator[tuple[str, str]]:
    built = TemplateBuilder(engine).status("base")
    assert built is not None, "the shipped base template is not built"
    dockerfile = DOCKERFILE.format(base=built.image_id)
    image, _ = engine.images.build(fileobj=io.BytesIO(dockerfile.encode()), rm=True)
    try:
        yield built.image_id, image.id
    finally:
        engine.images.remove(image.id, force=True, noprune=False)


def _entries(tree: Path) -> dict[str, tuple[Any, ...]]:
    found: dict[str, tuple[Any, ...]] = {}
    for root, dirnames, filenames in os.walk(tree):
        for name in [*dirnames, *filenames]:
            path = Path(root) / name
            info = os.lstat(path)
            kind = stat.S_IFMT(info.st_mode)
            if stat.S_ISREG(info.st_mode):
                detail: Any = hashlib.sha256(path.read_bytes()).hexdigest()
            elif stat.S_ISLNK(info.st_mode):
                detail = os.readlink(path)
            elif stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode):
                detail = info.st_rdev
            else:
                detail = None
            xattrs = sorted(
                (key, os.getxattr(path, key, follow_symlinks=False))
                for key in os.listxattr(path, follow_symlinks=False)
            )
            found[str(path.relative_to(tree))] = (
                kind,
                stat.S_IMODE(info.st_mode),
                info.st_uid,
                info.st_gid,
                detail,
                xattrs,
            )
    return found


def test_a_derived_tree_equals_a_full_export(
    engine: Any, images: tuple[str, str], tmp_path: Path
) -> None:
    base_id, child_id = images
    cache = tmp_path / "cache"
    base_tree = _rootfs.resolve_rootfs(base_id, cache).path  # no ancestor: exported whole
    # Its layers are recorded, so images built on it can be derived from it.
    meta_file = base_tree.with_name(base_tree.name + ".json")
    base_layers = engine.images.get(base_id).attrs["RootFS"]["Layers"]
    assert json.loads(meta_file.read_text())["layers"] == base_layers
    # A tree exported before layers were recorded gets them on its next use...
    legacy = {"env": {"PATH": "/usr/bin:/bin"}, "workdir": "/"}
    meta_file.write_text(json.dumps(legacy))
    assert _rootfs.resolve_rootfs(base_id, cache).path == base_tree
    assert json.loads(meta_file.read_text())["layers"] == base_layers
    # ... or when a tree is derived from it.
    meta_file.write_text(json.dumps(legacy))
    child_tree = _rootfs.resolve_rootfs(child_id, cache).path  # derived from it
    assert json.loads(meta_file.read_text()) == {**legacy, "layers": base_layers}

    # Derived, not exported: a file no layer touched is the base tree's very inode.
    untouched = "etc/debian_version"
    assert os.lstat(child_tree / untouched).st_ino == os.lstat(base_tree / untouched).st_ino
    # ... and the base tree is untouched by the child's changes.
    assert (base_tree / "etc/motd").exists() and (base_tree / "usr/share/doc").is_dir()
    assert not (base_tree / "opt/d").exists()

    exported = tmp_path / "exported"
    exported.mkdir()
    _rootfs._export(engine, child_id, exported / "tree")
    derived, full = _entries(child_tree), _entries(exported / "tree")
    assert derived.keys() == full.keys(), (
        sorted(derived.keys() - full.keys())[:20],
        sorted(full.keys() - derived.keys())[:20],
    )
    differ = {path: (derived[path], full[path]) for path in full if derived[path] != full[path]}
    assert differ == {}
    # The cases themselves are in the tree (a test that compared two empty trees proves nothing).
    assert derived["opt/d/new"][0] == stat.S_IFREG and "opt/d/a" not in derived
    assert derived["opt/tosymlink"][4] == "/etc" and derived["opt/todir"][0] == stat.S_IFREG
    assert [key for key, _ in derived["opt/xattr"][5]] == ["security.capability"]
    # A copy-up breaks a hard link (in both); a link made within one layer stays one.
    assert (child_tree / "opt/hard1").read_text() == "link\n"
    assert (child_tree / "opt/hard2").read_text() == "second\n"
    assert os.stat(child_tree / "opt/pair1").st_ino == os.stat(child_tree / "opt/pair2").st_ino
