"""Content digests that decide whether an image is current.

A template image is current when its ``sandgate.template.digest`` label equals
``template_digest(...)`` over: the recipe version below, the template name, every file
of its build context (path, executable bit, bytes; not mtimes or owners), the id of the
image it starts from and the build arguments. Nothing about the guest daemon goes in:
the guest is mounted into sandboxes at run time, not baked into images.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["RECIPE_VERSION", "context_digest", "package_list", "rootfs_digest", "template_digest"]

RECIPE_VERSION = "2"
"""Bump when the builder changes what it produces from the same inputs."""


def context_digest(directory: Path) -> str:
    """Hex SHA-256 over a build context's files, independent of mtimes and walk order."""
    if not directory.is_dir():
        raise FileNotFoundError(f"template build context not found: {directory}")
    digest = hashlib.sha256()
    for path in sorted(_walk(directory), key=lambda p: p.relative_to(directory).as_posix()):
        relative = path.relative_to(directory).as_posix()
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            kind, payload = b"L", os.readlink(path).encode()
        elif stat.S_ISDIR(mode):
            kind, payload = b"D", b""
        else:
            executable = b"x" if mode & 0o111 else b"-"
            kind, payload = b"F" + executable, hashlib.sha256(path.read_bytes()).digest()
        for part in (kind, relative.encode(), payload):
            digest.update(len(part).to_bytes(8, "big"))
            digest.update(part)
    return digest.hexdigest()


def template_digest(
    name: str, context: Path, base_image_id: str, build_args: Mapping[str, str]
) -> str:
    """Hex SHA-256 identifying the image a template build would produce."""
    return _digest_lines(
        [
            f"recipe {RECIPE_VERSION}",
            f"template {name}",
            f"context {context_digest(context)}",
            f"base {base_image_id}",
            *(f"arg {key}={build_args[key]}" for key in sorted(build_args)),
        ]
    )


def rootfs_digest(suite: str, variant: str, packages: Iterable[str]) -> str:
    """Hex SHA-256 identifying a debootstrap'ed root filesystem (the mirror is not part)."""
    return _digest_lines(
        [f"recipe {RECIPE_VERSION}", f"suite {suite}", f"variant {variant}"]
        + [f"package {name}" for name in sorted(set(packages))]
    )


def package_list(path: Path) -> list[str]:
    """Reads a ``packages.txt``: one package per line, ``#`` comments and blanks ignored."""
    names = []
    for line in path.read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            names.append(name)
    return names


def _walk(directory: Path) -> Iterable[Path]:
    for root, dirs, files in os.walk(directory):
        base = Path(root)
        yield from (base / d for d in dirs)
        yield from (base / f for f in files)


def _digest_lines(lines: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode() + b"\n")
    return digest.hexdigest()
