"""Build-context files: the archives the SDK uploads for ``COPY`` steps, kept by files hash.

The SDK asks ``GET /templates/{id}/files/{hash}`` whether the files of one ``COPY`` step are
present, and if not uploads a tar (gzip'ed by default) of them to the URL it is given. Archives
live at ``<root>/<template id>/<hash>.tar``: per template, so one team can neither probe for nor
build from another team's files. An upload is written to a temporary file, checked (a readable
tar of regular files, directories and symlinks with relative names, the links pointing inside
the context, nothing else) and only then renamed into place: a half-written or hostile archive
never becomes "present".

Staging a ``COPY`` extracts the archive with the standard library's ``data`` filter (no absolute
names, no ``..``, no links leaving the directory, no devices) and picks the entries the step's
source pattern matches, as the SDK matched them on the client.
"""

from __future__ import annotations

import asyncio
import glob
import os
import posixpath
import shutil
import tarfile
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

from .errors import TemplateBuildError

__all__ = ["ContextStore", "UploadRejected"]


class UploadRejected(Exception):
    """An uploaded archive was refused; the message says why (for a 400 answer)."""


class ContextStore:
    def __init__(self, root: Path) -> None:
        self._root = root

    def path(self, template_id: str, files_hash: str) -> Path:
        return self._root / template_id / f"{files_hash}.tar"

    def present(self, template_id: str, files_hash: str) -> bool:
        return self.path(template_id, files_hash).is_file()

    def forget(self, template_id: str) -> None:
        """Removes a deleted template's archives."""
        shutil.rmtree(self._root / template_id, ignore_errors=True)

    async def receive(
        self, template_id: str, files_hash: str, chunks: AsyncIterator[bytes], limit: int
    ) -> int:
        """Stores an upload; returns its size. Raises ``UploadRejected`` (too large, not a
        tar, a member that is not a plain file, directory or symlink, an unsafe name)."""
        target = self.path(template_id, files_hash)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, temp_name = tempfile.mkstemp(prefix=".upload-", dir=target.parent)
        temp = Path(temp_name)
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > limit:
                        raise UploadRejected(
                            f"the archive is larger than {limit} bytes (templates.max_context_mib)"
                        )
                    out.write(chunk)
            await asyncio.to_thread(_check_archive, temp)
            await asyncio.to_thread(temp.replace, target)
        finally:
            await asyncio.to_thread(temp.unlink, missing_ok=True)
        return size

    def stage(
        self, template_id: str, files_hash: str, src: str, mode: str | None, into: Path
    ) -> None:
        """Lays out ``into/payload`` and ``into/kind`` for the ``COPY`` script (see
        ``_plan._copy_script``). Raises ``TemplateBuildError`` when the files were never
        uploaded or the source matches nothing."""
        archive = self.path(template_id, files_hash)
        if not archive.is_file():
            raise TemplateBuildError(
                f"the files of COPY {src} (hash {files_hash[:12]}) were never uploaded: "
                "build again (the SDK uploads missing files first)"
            )
        with tempfile.TemporaryDirectory(prefix="sandgate-copy-") as scratch:
            context = Path(scratch)
            with tarfile.open(archive, mode="r:*") as tar:
                tar.extractall(context, filter="data")
            matches = _matches(context, src)
            if not matches:
                raise TemplateBuildError(f"COPY {src}: no uploaded file matches {src!r}")
            payload = into / "payload"
            if len(matches) == 1 and matches[0].is_dir() and not matches[0].is_symlink():
                shutil.copytree(matches[0], payload, symlinks=True)
                kind = "dir"
            else:
                payload.mkdir(parents=True)
                for match in matches:
                    if match.is_dir() and not match.is_symlink():
                        shutil.copytree(match, payload / match.name, symlinks=True)
                    else:
                        shutil.copy2(match, payload / match.name, follow_symlinks=False)
                kind = "entries"
            (into / "kind").write_text(kind)
            if mode:
                _chmod_tree(payload, int(mode, 8))
            payload.chmod(0o755)


def _matches(context: Path, src: str) -> list[Path]:
    """Top-level entries matching ``src`` (a path or a glob, relative to the context)."""
    pattern = src.removeprefix("./").rstrip("/") or "."
    found = sorted(
        glob.glob(pattern, root_dir=context, recursive=True, include_hidden=True),
        key=len,
    )
    chosen: list[str] = []
    for name in found:
        if not any(name == c or name.startswith(c.rstrip("/") + "/") for c in chosen):
            chosen.append(name)
    return [context / name for name in chosen]


def _chmod_tree(root: Path, mode: int) -> None:
    """Applies ``mode`` to every copied entry below ``root`` (symlinks keep theirs)."""
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(directory) / name
            if not path.is_symlink():
                path.chmod(mode)


def _check_archive(path: Path) -> None:
    try:
        with tarfile.open(path, mode="r:*") as tar:
            for member in tar:
                name = member.name
                if name.startswith("/") or ".." in Path(name).parts:
                    raise UploadRejected(f"archive member {name!r} leaves the build context")
                if not (member.isfile() or member.isdir() or member.issym()):
                    raise UploadRejected(
                        f"archive member {name!r} is not a file, directory or symlink"
                    )
                if member.issym() and _escapes(name, member.linkname):
                    raise UploadRejected(
                        f"archive member {name!r} links to {member.linkname!r}, outside the "
                        "build context (COPY keeps symlinks; point them inside, relatively)"
                    )
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise UploadRejected(f"the upload is not a (gzip'ed) tar archive: {exc}") from None


def _escapes(name: str, target: str) -> bool:
    """Whether a symlink ``name -> target`` points outside the context: the rule of the
    ``data`` filter ``stage`` extracts with, checked here so such an archive is refused when
    it arrives instead of failing a build later."""
    if not target or target.startswith("/"):
        return True
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
    return resolved == ".." or resolved.startswith("../")
