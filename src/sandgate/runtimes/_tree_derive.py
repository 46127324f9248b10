"""A template tree made from a tree already exported, instead of a whole ``docker export``.

Templates are built on templates: a team's image is the shipped ``base`` plus a few layers. A
full export copies every file again (seconds for ``base``, half a minute for the code
interpreter) and stores it again. When the engine keeps layers with the ``overlay2`` driver,
the tree of an image whose layers start with an exported image's layers is that image's tree
hard-linked (``cp -al``: new directories, shared file inodes) with only the remaining layers
applied from the engine's layer directories: whiteouts (0/0 character devices) remove, opaque
directories replace, everything else is linked in (or copied across file systems).

Trust: a tree is only ever mounted read-only (idmapped, ``nosuid``) under each sandbox's own
copy-on-write layer, and nothing writes into a tree once made, so trees may share inodes with
each other and with the engine's layers (which the engine never changes after a commit). A
file that carries overlay metadata of its own is copied instead, without it. Anything
unexpected (another storage driver, ``redirect_dir``/``metacopy`` layers, unreadable
directories) makes ``derive_tree`` answer ``False`` and the caller exports as before.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import subprocess
from collections.abc import Sequence
from pathlib import Path

__all__ = ["apply_layer", "derive_tree", "layer_dirs"]

#: Extended attributes overlayfs keeps for itself (``trusted.`` as root, ``user.`` rootless).
_OVERLAY_XATTRS = ("trusted.overlay.", "user.overlay.")


class _Unsupported(Exception):
    """A layer uses an overlay feature this module does not replay."""


def layer_dirs(attrs: dict[str, object]) -> list[Path] | None:
    """The image's layer directories, bottom first, or ``None`` if the engine does not keep
    its layers as ``overlay2`` directories this process can read."""
    driver = attrs.get("GraphDriver")
    rootfs = attrs.get("RootFS")
    if not isinstance(driver, dict) or driver.get("Name") != "overlay2":
        return None
    if not isinstance(rootfs, dict) or not isinstance(rootfs.get("Layers"), list):
        return None
    data = driver.get("Data") or {}
    upper = data.get("UpperDir")
    if not isinstance(upper, str) or not upper:
        return None
    lower = data.get("LowerDir")
    top_first = [upper] + (lower.split(":") if isinstance(lower, str) and lower else [])
    dirs = [Path(path) for path in reversed(top_first)]
    if len(dirs) != len(rootfs["Layers"]):
        return None
    if not all(os.access(path, os.R_OK | os.X_OK) and path.is_dir() for path in dirs):
        return None
    return dirs


def derive_tree(ancestor: Path, layers: Sequence[Path], target: Path) -> bool:
    """Makes ``target`` = ``ancestor`` + ``layers`` (applied in order); ``False`` (and nothing
    at ``target``) if it cannot, so the caller exports instead."""
    if _overlay_features_on():
        return False
    cp = shutil.which("cp")
    if cp is None:
        return False
    scratch = target.with_name(f".{target.name[:12]}-derive")
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        linked = subprocess.run(
            [cp, "-a", "--link", "--no-target-directory", str(ancestor), str(scratch)],
            capture_output=True,
            check=False,
        )
        if linked.returncode != 0:
            raise _Unsupported(linked.stderr.decode(errors="replace")[:200])
        for layer in layers:
            apply_layer(layer, scratch)
        with contextlib.suppress(FileNotFoundError):
            (scratch / ".dockerenv").unlink()
        scratch.chmod(0o755)
        shutil.rmtree(target, ignore_errors=True)
        scratch.rename(target)
    except (OSError, _Unsupported):
        shutil.rmtree(scratch, ignore_errors=True)
        return False
    return True


def _overlay_features_on() -> bool:
    """Layers written with ``metacopy`` (data elsewhere) or ``redirect_dir`` (renames kept as
    xattrs) cannot be replayed file by file."""
    for name in ("metacopy", "redirect_dir"):
        with contextlib.suppress(OSError):
            value = Path(f"/sys/module/overlay/parameters/{name}").read_text().strip()
            if value not in ("N", "off", "nofollow", ""):
                return True
    return False


def apply_layer(layer: Path, tree: Path) -> None:
    """Replays one overlay layer directory onto ``tree`` (in place)."""
    #: Files of this layer with more than one name: the first copy's path, by source inode.
    copies: dict[tuple[int, int], Path] = {}
    for root, dirnames, filenames in os.walk(layer):
        source_dir = Path(root)
        dest_dir = tree / source_dir.relative_to(layer)
        descend = []
        for name in [*dirnames, *filenames]:
            source, dest = source_dir / name, dest_dir / name
            info = os.lstat(source)
            if stat.S_ISDIR(info.st_mode):
                _apply_dir(source, dest, info)
                descend.append(name)
            elif stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
                _remove(dest)  # a whiteout: the file is gone in this layer
            else:
                _remove(dest)
                first = copies.get((info.st_dev, info.st_ino)) if info.st_nlink > 1 else None
                if first is not None and stat.S_ISREG(info.st_mode):
                    os.link(first, dest)  # a hard link within the layer stays one
                    continue
                _place(source, dest, info)
                if info.st_nlink > 1:
                    copies[(info.st_dev, info.st_ino)] = dest
        dirnames[:] = [name for name in dirnames if name in descend]
        _copy_dir_meta(source_dir, dest_dir, os.lstat(source_dir))


def _apply_dir(source: Path, dest: Path, info: os.stat_result) -> None:
    xattrs = _xattrs(source)
    if any(name.endswith("overlay.redirect") for name in xattrs):
        raise _Unsupported(f"{source} is a renamed directory (redirect_dir)")
    opaque = any(name.endswith("overlay.opaque") and xattrs[name] == b"y" for name in xattrs)
    if opaque or not (dest.is_dir() and not dest.is_symlink()):
        _remove(dest)
        dest.mkdir()
    _copy_dir_meta(source, dest, info)


def _copy_dir_meta(source: Path, dest: Path, info: os.stat_result) -> None:
    os.lchown(dest, info.st_uid, info.st_gid)
    os.chmod(dest, stat.S_IMODE(info.st_mode))
    for name, value in _xattrs(source).items():
        if not name.startswith(_OVERLAY_XATTRS):
            os.setxattr(dest, name, value, follow_symlinks=False)
    os.utime(dest, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)


def _place(source: Path, dest: Path, info: os.stat_result) -> None:
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        os.symlink(os.readlink(source), dest)
    elif stat.S_ISREG(mode):
        own = _xattrs(source)
        if any(name.startswith(_OVERLAY_XATTRS) for name in own):
            _copy_file(source, dest, info, own)
            return
        try:
            os.link(source, dest, follow_symlinks=False)
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise
        _copy_file(source, dest, info, own)
        return
    elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        os.mknod(dest, mode, info.st_rdev)
    elif stat.S_ISFIFO(mode):
        os.mkfifo(dest, stat.S_IMODE(mode))
    else:
        return  # sockets are not image content
    os.lchown(dest, info.st_uid, info.st_gid)
    if not stat.S_ISLNK(mode):
        os.chmod(dest, stat.S_IMODE(mode))
    os.utime(dest, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)


def _copy_file(source: Path, dest: Path, info: os.stat_result, xattrs: dict[str, bytes]) -> None:
    shutil.copyfile(source, dest, follow_symlinks=False)
    os.lchown(dest, info.st_uid, info.st_gid)
    os.chmod(dest, stat.S_IMODE(info.st_mode))
    for name, value in xattrs.items():
        if not name.startswith(_OVERLAY_XATTRS):
            os.setxattr(dest, name, value, follow_symlinks=False)
    os.utime(dest, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)


def _xattrs(path: Path) -> dict[str, bytes]:
    try:
        names = os.listxattr(path, follow_symlinks=False)
    except OSError:
        return {}
    found = {}
    for name in names:
        with contextlib.suppress(OSError):
            found[name] = os.getxattr(path, name, follow_symlinks=False)
    return found


def _remove(path: Path) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(path)
    else:
        path.unlink()
