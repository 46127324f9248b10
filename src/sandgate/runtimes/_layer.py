"""A sandbox's writable layer as a file: saved from one sandbox, restored into another.

Everything a sandbox has written lives in its overlay's upper directory (``_stage``): new and
changed files, whiteouts (character devices 0/0) for deleted ones, and directories marked
opaque (``trusted.overlay.opaque``). A *layer archive* is that directory as a POSIX (pax) tar:

* owners are stored **relative to the sandbox's uid range** (host uid ``base + k`` is stored as
  ``k``), so the archive restores into any other sandbox's range; ids in POSIX ACLs likewise;
* modes, symlinks, hard links, FIFOs and whiteouts are kept exactly, modification times to the
  second (as in Docker's image layers; a sub-second time would cost each file a second
  header, doubling the per-file cost of saving and restoring); sockets are
  dropped (they mean nothing without their process), and so are other device nodes (no
  sandbox can make one: it holds no ``CAP_MKNOD``);
* extended attributes in ``trusted.overlay.*`` (overlayfs's own: opaque, origin, impure…),
  ``user.*`` and the ACLs are kept, base64-encoded in ``SANDGATE.xattr.<name>`` pax records;
  ``security.*`` is dropped (file capabilities never apply on a ``nosuid`` mount).

``tar -tvf`` lists an archive; restore it only with :func:`import_layer`.

Trust: the upper's *contents* are the sandbox's (hostile); its layout is the kernel's. Saving
runs as host root while the sandbox is frozen: every entry is reached relative to an open
directory with ``O_NOFOLLOW``, so no link the sandbox made is followed. Restoring runs as host
root into the new sandbox's empty upper before anything runs in it: every path is checked
(relative, no ``..``), every directory on the way is opened ``O_NOFOLLOW`` (a link in the
archive never becomes a way out), every id must be inside the range, and only the entry types
and attributes above are created.
"""

from __future__ import annotations

import base64
import errno
import os
import stat
import struct
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sandgate.errors import DiskFull, SnapshotDamaged, SnapshotNotFound
from sandgate.runtimes._uids import UIDS_PER_SANDBOX

__all__ = ["LayerStats", "export_layer", "import_layer", "layer_usage"]

#: Inside id given to a file whose host owner is outside the sandbox's range (cannot happen
#: for files the sandbox made; kept as a fallback rather than failing a save).
_NOBODY = 65534
_XATTR_RECORD = "SANDGATE.xattr."
_KEPT_XATTRS = ("trusted.overlay.", "user.")
_ACL_XATTRS = ("system.posix_acl_access", "system.posix_acl_default")
_ACL_USER, _ACL_GROUP = 0x02, 0x08
_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_COPY_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class LayerStats:
    """What a save wrote: the archive's size and its entries (and what it left out)."""

    size_bytes: int
    entries: int
    skipped: int


def layer_usage(upper: Path) -> int:
    """Bytes in use on the file system that holds ``upper`` (the sandbox's disk): an upper
    bound of a save's size, known before saving."""
    usage = os.statvfs(upper)
    return (usage.f_blocks - usage.f_bfree) * usage.f_frsize


# -- save -------------------------------------------------------------------------------------


def export_layer(upper: Path, base: int, archive: Path) -> LayerStats:
    """Writes ``upper`` (a sandbox's upper directory, uid range starting at ``base``) to
    ``archive``, which must not exist. The sandbox must be frozen or gone. The archive is
    fsynced before this returns; on failure it is removed."""
    fd = os.open(archive, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as raw:
            with tarfile.TarFile(
                fileobj=raw,
                mode="w",
                format=tarfile.PAX_FORMAT,
                encoding="utf-8",
                errors="surrogateescape",
                copybufsize=_COPY_CHUNK,
            ) as tar:
                writer = _Writer(tar, base)
                writer.write_tree(upper)
            raw.flush()
            os.fsync(raw.fileno())
        return LayerStats(archive.stat().st_size, writer.entries, writer.skipped)
    except BaseException:
        archive.unlink(missing_ok=True)
        raise


class _Writer:
    def __init__(self, tar: tarfile.TarFile, base: int) -> None:
        self._tar = tar
        self._base = base
        self._links: dict[tuple[int, int], str] = {}
        self.entries = 0
        self.skipped = 0

    def write_tree(self, upper: Path) -> None:
        root = os.open(upper, _DIR_OPEN)
        try:
            self._add(root, ".", os.fstat(root), ".")
            self._walk(root, "")
        finally:
            os.close(root)

    def _walk(self, top: int, top_name: str) -> None:
        """Pre-order, iteratively (a deep tree must not exhaust the stack); at most one
        directory fd per level is open."""
        stack: list[tuple[int, str, Iterator[str]]] = [(top, top_name, iter(_names(top)))]
        while stack:
            dir_fd, prefix, names = stack[-1]
            name = next(names, None)
            if name is None:
                stack.pop()
                if dir_fd != top:
                    os.close(dir_fd)
                continue
            path = f"{prefix}{name}"
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            self._add(dir_fd, name, st, path)
            if stat.S_ISDIR(st.st_mode):
                child = os.open(name, _DIR_OPEN, dir_fd=dir_fd)
                stack.append((child, f"{path}/", iter(_names(child))))

    def _add(self, dir_fd: int, name: str, st: os.stat_result, path: str) -> None:
        info = tarfile.TarInfo(path)
        info.mode = stat.S_IMODE(st.st_mode)
        info.uid = self._inside(st.st_uid)
        info.gid = self._inside(st.st_gid)
        info.mtime = int(st.st_mtime)  # whole seconds, as Docker's layers: one header a file
        info.uname = info.gname = ""
        data: IO[bytes] | None = None
        kind = stat.S_IFMT(st.st_mode)
        key = (st.st_dev, st.st_ino)
        if kind != stat.S_IFDIR and st.st_nlink > 1 and key in self._links:
            info.type = tarfile.LNKTYPE
            info.linkname = self._links[key]
        elif kind == stat.S_IFDIR:
            info.type = tarfile.DIRTYPE
        elif kind == stat.S_IFREG:
            info.type = tarfile.REGTYPE
            data = _open_regular(dir_fd, name, st)
            info.size = st.st_size
        elif kind == stat.S_IFLNK:
            info.type = tarfile.SYMTYPE
            info.linkname = os.readlink(name, dir_fd=dir_fd)
        elif kind == stat.S_IFCHR and st.st_rdev == 0:
            info.type = tarfile.CHRTYPE  # an overlayfs whiteout
            info.devmajor = info.devminor = 0
        elif kind == stat.S_IFIFO:
            info.type = tarfile.FIFOTYPE
        else:
            self.skipped += 1  # a socket (or a device node nothing can have made)
            return
        if kind != stat.S_IFDIR and st.st_nlink > 1:
            self._links.setdefault(key, path)
        info.pax_headers = self._xattrs(dir_fd, name)
        try:
            self._tar.addfile(info, data)
        finally:
            if data is not None:
                data.close()
        self.entries += 1

    def _xattrs(self, dir_fd: int, name: str) -> dict[str, str]:
        where = _proc_path(dir_fd, name)
        records: dict[str, str] = {}
        try:
            names = os.listxattr(where, follow_symlinks=False)
        except OSError as exc:
            if exc.errno in (errno.ENOTSUP, errno.EPERM):
                return records
            raise
        for attr in sorted(names):
            if not (attr.startswith(_KEPT_XATTRS) or attr in _ACL_XATTRS):
                continue
            try:
                value = os.getxattr(where, attr, follow_symlinks=False)
            except OSError as exc:
                if exc.errno == errno.ENODATA:
                    continue
                raise
            if attr in _ACL_XATTRS:
                value = _remap_acl(value, self._inside)
            records[_XATTR_RECORD + attr] = base64.b64encode(value).decode("ascii")
        return records

    def _inside(self, host_id: int) -> int:
        inside = host_id - self._base
        return inside if 0 <= inside < UIDS_PER_SANDBOX else _NOBODY


def _names(dir_fd: int) -> list[str]:
    with os.scandir(dir_fd) as entries:
        return sorted(entry.name for entry in entries)


def _open_regular(dir_fd: int, name: str, st: os.stat_result) -> IO[bytes]:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino) or not stat.S_ISREG(opened.st_mode):
        os.close(fd)
        raise SnapshotDamaged(f"{name!r} changed while the layer was saved")
    return os.fdopen(fd, "rb")


def _proc_path(dir_fd: int, name: str) -> str:
    """A path naming ``name`` in the open directory ``dir_fd`` for calls that take no dir_fd
    (the xattr calls): the magic link is followed, ``name`` itself is not (with
    ``follow_symlinks=False``)."""
    return f"/proc/self/fd/{dir_fd}/{name}"


def _remap_acl(value: bytes, remap: Callable[[int], int]) -> bytes:
    """A POSIX ACL xattr (version 2: a 4-byte header, 8-byte entries ``tag, perm, id``) with
    the ids of named users and groups passed through ``remap``."""
    if len(value) < 4 or (len(value) - 4) % 8:
        raise SnapshotDamaged("a POSIX ACL attribute is malformed")
    out = bytearray(value[:4])
    for offset in range(4, len(value), 8):
        tag, perm, ident = struct.unpack_from("<HHI", value, offset)
        if tag in (_ACL_USER, _ACL_GROUP):
            ident = remap(ident)
        out += struct.pack("<HHI", tag, perm, ident)
    return bytes(out)


# -- restore ----------------------------------------------------------------------------------


def import_layer(archive: Path, upper: Path, base: int, *, disk_mib: int) -> None:
    """Fills the empty directory ``upper`` (a new sandbox's, uid range starting at ``base``)
    from ``archive``. Raises ``DiskFull`` when the files do not fit the sandbox's disk
    (``disk_mib``) and ``SnapshotDamaged`` for an archive that is not a layer archive or
    breaks a rule above; the caller discards the half-filled upper."""
    try:
        with (
            open(archive, "rb") as raw,
            tarfile.TarFile(
                fileobj=raw, mode="r", encoding="utf-8", errors="surrogateescape"
            ) as tar,
        ):
            _Reader(tar, raw.fileno(), upper, base).restore()
    except FileNotFoundError as exc:
        if exc.filename == str(archive):
            raise SnapshotNotFound(
                f"the saved layer {archive.parent.name} is gone (deleted meanwhile)"
            ) from None
        raise
    except tarfile.TarError as exc:
        raise SnapshotDamaged(f"the saved layer {archive.name} is unreadable: {exc}") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            size = archive.stat().st_size // (1024 * 1024)
            raise DiskFull(
                f"the saved layer ({size} MiB) does not fit this sandbox's disk "
                f"(limits.disk_mib = {disk_mib}); raise limits.disk_mib"
            ) from None
        raise


@dataclass
class _Pending:
    """A directory's mode and times, applied once its children exist (adding an entry
    changes a directory's mtime; its mode may forbid the additions)."""

    parts: tuple[str, ...]
    mode: int
    mtime: float


class _Reader:
    def __init__(self, tar: tarfile.TarFile, archive_fd: int, upper: Path, base: int) -> None:
        self._tar = tar
        self._archive_fd = archive_fd
        self._base = base
        self._root = os.open(upper, _DIR_OPEN)
        #: The open directories of the path being filled: (parts, fd), root first.
        self._stack: list[tuple[tuple[str, ...], int]] = [((), self._root)]
        self._dirs: list[_Pending] = []

    def restore(self) -> None:
        try:
            first = True
            for member in self._tar:
                parts = _parts(member.name)
                if first != (parts == ()):
                    raise SnapshotDamaged("a layer archive starts with its root, once")
                first = False
                self._restore(member, parts)
            for pending in reversed(self._dirs):
                fd = self._open_dir(pending.parts)
                try:
                    os.chmod(fd, pending.mode)
                    os.utime(fd, (pending.mtime, pending.mtime))
                finally:
                    if fd != self._root:
                        os.close(fd)
        finally:
            for _, fd in self._stack[1:]:
                os.close(fd)
            os.close(self._root)

    def _restore(self, member: tarfile.TarInfo, parts: tuple[str, ...]) -> None:
        uid, gid = self._host(member.uid), self._host(member.gid)
        if parts == ():
            if not member.isdir():
                raise SnapshotDamaged("a layer archive's root is not a directory")
            self._finish_dir(self._root, (), member, uid, gid)
            return
        parent = self._parent(parts)
        name = parts[-1]
        if member.isdir():
            os.mkdir(name, 0o700, dir_fd=parent)
            fd = os.open(name, _DIR_OPEN, dir_fd=parent)
            try:
                self._finish_dir(fd, parts, member, uid, gid)
            finally:
                os.close(fd)
        elif member.isreg():
            self._write_file(parent, name, member, uid, gid)
        elif member.issym():
            os.symlink(member.linkname, name, dir_fd=parent)
            self._finish_entry(parent, name, member, uid, gid)
        elif member.islnk():
            target = _parts(member.linkname)
            if not target:
                raise SnapshotDamaged("a hard link in a layer archive names the root")
            target_dir = self._open_dir(target[:-1])
            try:
                os.link(
                    target[-1],
                    name,
                    src_dir_fd=target_dir,
                    dst_dir_fd=parent,
                    follow_symlinks=False,
                )
            except (FileNotFoundError, PermissionError):
                raise SnapshotDamaged(
                    f"a hard link in a layer archive names {member.linkname[:80]!r}, "
                    "which it did not make"
                ) from None
            finally:
                if target_dir != self._root:
                    os.close(target_dir)
        elif member.ischr() and member.devmajor == 0 and member.devminor == 0:
            os.mknod(name, stat.S_IFCHR | (member.mode & 0o7777), 0, dir_fd=parent)
            self._finish_entry(parent, name, member, uid, gid)
        elif member.isfifo():
            os.mkfifo(name, 0o600, dir_fd=parent)
            self._finish_entry(parent, name, member, uid, gid)
        else:
            raise SnapshotDamaged(f"a layer archive holds {member.name!r} of a forbidden type")

    def _write_file(
        self, parent: int, name: str, member: tarfile.TarInfo, uid: int, gid: int
    ) -> None:
        if member.issparse():
            raise SnapshotDamaged(f"{member.name!r} is a sparse member (not a layer archive)")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(name, flags, 0o600, dir_fd=parent)
        try:
            self._copy_data(member, fd)
            os.fchown(fd, uid, gid)  # before the mode: chown clears set-id bits
            os.fchmod(fd, member.mode & 0o7777)
            self._set_xattrs(fd, member)
            os.utime(fd, (member.mtime, member.mtime))
        finally:
            os.close(fd)

    def _copy_data(self, member: tarfile.TarInfo, fd: int) -> None:
        """A member's data is contiguous in the archive: the kernel copies it (``sendfile``
        at an explicit offset leaves the archive's read position alone)."""
        offset, left = member.offset_data, member.size
        while left:
            sent = os.sendfile(fd, self._archive_fd, offset, min(left, 1 << 30))
            if sent == 0:
                raise SnapshotDamaged(f"{member.name!r} is cut short (the archive is truncated)")
            offset += sent
            left -= sent

    def _finish_dir(
        self, fd: int, parts: tuple[str, ...], member: tarfile.TarInfo, uid: int, gid: int
    ) -> None:
        os.fchown(fd, uid, gid)
        self._set_xattrs(fd, member)
        self._dirs.append(_Pending(parts, member.mode & 0o7777, member.mtime))

    def _finish_entry(
        self, parent: int, name: str, member: tarfile.TarInfo, uid: int, gid: int
    ) -> None:
        os.chown(name, uid, gid, dir_fd=parent, follow_symlinks=False)
        if not member.issym():  # made just now by this process: not a link
            os.chmod(name, member.mode & 0o7777, dir_fd=parent)
        self._set_xattrs(_proc_path(parent, name), member)
        os.utime(name, (member.mtime, member.mtime), dir_fd=parent, follow_symlinks=False)

    def _set_xattrs(self, where: int | str, member: tarfile.TarInfo) -> None:
        for key, encoded in member.pax_headers.items():
            if not key.startswith(_XATTR_RECORD):
                continue
            attr = key.removeprefix(_XATTR_RECORD)
            if not (attr.startswith(_KEPT_XATTRS) or attr in _ACL_XATTRS):
                raise SnapshotDamaged(f"a layer archive sets the attribute {attr!r}")
            try:
                value = base64.b64decode(encoded, validate=True)
            except ValueError:
                raise SnapshotDamaged(f"the attribute {attr!r} is not base64") from None
            if attr in _ACL_XATTRS:
                value = _remap_acl(value, self._host)
            if isinstance(where, int):
                os.setxattr(where, attr, value)
            else:
                os.setxattr(where, attr, value, follow_symlinks=False)

    def _host(self, inside: int) -> int:
        if not 0 <= inside < UIDS_PER_SANDBOX:
            raise SnapshotDamaged(f"a layer archive names id {inside}, outside a sandbox's range")
        return self._base + inside

    def _parent(self, parts: tuple[str, ...]) -> int:
        """The open directory that holds ``parts``, reusing the stack of the previous entry
        (archives are in pre-order, so it is usually on top)."""
        wanted = parts[:-1]
        while len(self._stack) > 1 and wanted[: len(self._stack[-1][0])] != self._stack[-1][0]:
            os.close(self._stack.pop()[1])
        while len(self._stack[-1][0]) < len(wanted):
            have, fd = self._stack[-1]
            child = wanted[len(have)]
            self._stack.append(((*have, child), _open_child(fd, child)))
        return self._stack[-1][1]

    def _open_dir(self, parts: tuple[str, ...]) -> int:
        """A new fd of the directory ``parts`` (the root's own fd for ``()``)."""
        fd = self._root
        for part in parts:
            child = _open_child(fd, part)
            if fd != self._root:
                os.close(fd)
            fd = child
        return fd


def _open_child(dir_fd: int, name: str) -> int:
    try:
        return os.open(name, _DIR_OPEN, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            raise SnapshotDamaged(
                f"a layer archive puts an entry under {name!r}, which is not a directory it made"
            ) from None
        raise


def _parts(name: str) -> tuple[str, ...]:
    """The components of an archive path; ``()`` is the root. Absolute paths, ``..`` and
    empty components are refused."""
    if name in (".", "./"):
        return ()
    if name.startswith("/") or "\0" in name:
        raise SnapshotDamaged(f"a layer archive names {name[:80]!r}")
    parts = tuple(name.removeprefix("./").rstrip("/").split("/"))
    if any(part in ("", ".", "..") for part in parts):
        raise SnapshotDamaged(f"a layer archive names {name[:80]!r}")
    return parts
