"""``EntryInfo``: what the guest reports about a file, matching envd's semantics.

``permissions`` is Go's ``os.FileMode.String()`` of the *lstat*; for a symlink ``type`` and
``mode`` describe the target and ``symlink_target`` is the resolved absolute target.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from functools import lru_cache
from typing import Any

__all__ = ["METADATA_PREFIX", "entry_info", "go_mode_string", "read_metadata"]

METADATA_PREFIX = "user.e2b."

# Go's type letters, in Go's order ("dalTLDpSugct?"), for the bits Linux can report.
_GO_LETTERS = "dalTLDpSugct?"


def go_mode_string(mode: int) -> str:
    """Formats an ``st_mode`` the way Go's ``FileMode.String`` does (``-rw-r--r--``)."""
    flags: set[str] = set()
    fmt = stat.S_IFMT(mode)
    if fmt == stat.S_IFDIR:
        flags.add("d")
    elif fmt == stat.S_IFLNK:
        flags.add("L")
    elif fmt == stat.S_IFBLK:
        flags.add("D")
    elif fmt == stat.S_IFCHR:
        flags.update("Dc")
    elif fmt == stat.S_IFIFO:
        flags.add("p")
    elif fmt == stat.S_IFSOCK:
        flags.add("S")
    elif fmt != stat.S_IFREG:
        flags.add("?")
    if mode & stat.S_ISUID:
        flags.add("u")
    if mode & stat.S_ISGID:
        flags.add("g")
    if mode & stat.S_ISVTX:
        flags.add("t")
    prefix = "".join(c for c in _GO_LETTERS if c in flags) or "-"
    perms = "".join(ch if mode & (1 << (8 - i)) else "-" for i, ch in enumerate("rwxrwxrwx"))
    return prefix + perms


@lru_cache(maxsize=256)
def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@lru_cache(maxsize=256)
def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _type_of(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    return "unspecified"


def read_metadata(target: str | int) -> dict[str, str]:
    """The ``user.e2b.*`` xattrs of a path or fd, prefix stripped; ``{}`` when unsupported."""
    try:
        names = os.listxattr(target)
    except OSError:
        return {}
    result: dict[str, str] = {}
    for name in names:
        if name.startswith(METADATA_PREFIX):
            try:
                value = os.getxattr(target, name)
            except OSError:
                continue
            result[name[len(METADATA_PREFIX) :]] = value.decode("utf-8", "replace")
    return result


def entry_info(path: str) -> dict[str, Any]:
    """Returns the EntryInfo JSON of ``path`` (not following a final symlink for the lstat).

    Raises ``OSError`` (``FileNotFoundError`` when missing) for the caller to translate.
    """
    lst = os.lstat(path)
    mode_src = lst.st_mode
    kind = _type_of(lst.st_mode)
    target: str | None = None
    metadata: dict[str, str] = {}
    if stat.S_ISLNK(lst.st_mode):
        target = os.path.realpath(path)
        try:
            st = os.stat(path)
        except OSError:
            kind = "unspecified"
        else:
            mode_src = st.st_mode
            kind = _type_of(st.st_mode)
            metadata = read_metadata(path)
    elif kind in ("file", "dir"):
        metadata = read_metadata(path)
    return {
        "name": os.path.basename(path) or path,
        "type": kind,
        "path": path,
        "size": lst.st_size,
        "mode": stat.S_IMODE(mode_src) & 0o777,
        "permissions": go_mode_string(lst.st_mode),
        "owner": _owner(lst.st_uid),
        "group": _group(lst.st_gid),
        "modified_time": lst.st_mtime,
        "symlink_target": target,
        "metadata": metadata,
    }
