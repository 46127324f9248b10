"""Offline starting point: a Debian root filesystem made with debootstrap.

``bootstrap_rootfs`` runs ``debootstrap --variant=minbase --include=<packages>`` into a
temporary directory, strips what an image should not carry (apt caches, the host's
resolv.conf and hostname, device nodes), and streams ``tar -C dir -c .`` into
``docker import``. Needs root and a reachable Debian mirror; never a container registry.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from ._progress import BuildStep, ProgressCallback
from .errors import TemplateBuildError

if TYPE_CHECKING:
    from ._docker import DockerImages

__all__ = [
    "DEFAULT_MIRROR",
    "SUITE",
    "VARIANT",
    "bootstrap_rootfs",
    "bootstrap_tree",
    "remove_tree",
    "run_streaming",
]

DEFAULT_MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
VARIANT = "minbase"

_CHUNK = 1 << 20
_EXPECTED_PACKAGES = 140
"""A guess at how many packages minbase plus our includes pull in, for the progress bar
until debootstrap has told us the real number."""


def bootstrap_rootfs(
    images: DockerImages,
    *,
    ref: str,
    packages: list[str],
    mirror: str,
    labels: dict[str, str],
    on_progress: ProgressCallback,
    workdir: Path | None = None,
) -> str:
    """Builds and imports the root filesystem as image ``ref``; returns the image id.

    The temporary directory is removed afterwards, also on failure or interrupt.
    Raises ``TemplateBuildError`` when debootstrap is missing, we are not root, the
    mirror is unreachable, or debootstrap/tar/import fail.
    """
    target = Path(tempfile.mkdtemp(prefix="sandgate-rootfs-", dir=workdir))
    try:
        bootstrap_tree(target, packages=packages, mirror=mirror, on_progress=on_progress)
        changes = [
            *(f"LABEL {key}={value}" for key, value in labels.items()),
            "ENV LANG=C.UTF-8",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            'CMD ["/bin/bash"]',
        ]
        return _import(images, target, ref, changes, on_progress)
    finally:
        remove_tree(target)


def bootstrap_tree(
    target: Path, *, packages: list[str], mirror: str, on_progress: ProgressCallback
) -> None:
    """debootstraps into the empty directory ``target`` and strips it. Raises
    ``TemplateBuildError`` (debootstrap missing, not root, mirror unreachable, failure)."""
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise TemplateBuildError(
            "debootstrap not found: apt-get install debootstrap (or use --source registry)"
        )
    if os.geteuid() != 0:
        raise TemplateBuildError(
            "debootstrap must run as root: run the build as root (or use --source registry)"
        )
    _check_mirror(mirror)
    _run_debootstrap(debootstrap, target, packages, mirror, on_progress)
    _strip(target)


def _check_mirror(mirror: str) -> None:
    url = f"{mirror.rstrip('/')}/dists/{SUITE}/Release"
    if not url.startswith(("http://", "https://")):
        raise TemplateBuildError(f"Debian mirror must be an http(s) URL, got {mirror!r}")
    request = urllib.request.Request(url, method="HEAD")  # noqa: S310 (scheme checked above)
    try:
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310
            pass
    except (urllib.error.URLError, OSError) as exc:
        raise TemplateBuildError(
            f"Debian mirror unreachable ({url}: {exc}): set templates.mirror (--mirror URL) "
            "or make a registry reachable (--source registry)"
        ) from exc


def _run_debootstrap(
    debootstrap: str,
    target: Path,
    packages: list[str],
    mirror: str,
    on_progress: ProgressCallback,
) -> None:
    command = [
        debootstrap,
        f"--variant={VARIANT}",
        f"--include={','.join(packages)}",
        SUITE,
        str(target),
        mirror,
    ]
    on_progress(BuildStep.DEBOOTSTRAP, 0.0, f"debootstrap {SUITE} from {mirror}")
    tracker = _DebootstrapTracker()

    def on_line(line: str) -> None:
        on_progress(BuildStep.DEBOOTSTRAP, tracker.feed(line), line.removeprefix("I: "))

    code, output = run_streaming(command, on_line)
    if code != 0:
        raise TemplateBuildError(f"debootstrap failed (exit {code}); last output:\n{output}")
    on_progress(BuildStep.DEBOOTSTRAP, 1.0, "root filesystem ready")


def run_streaming(argv: list[str], on_line: Callable[[str], None]) -> tuple[int, str]:
    """Runs ``argv`` (stdout and stderr merged), handing each line to ``on_line``; returns the
    exit status and the last 15 lines, for an error message. Killed if interrupted."""
    tail: list[str] = []
    with subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as process:
        assert process.stdout is not None
        try:
            for raw in process.stdout:
                line = raw.rstrip()
                tail = [*tail[-14:], line]
                on_line(line)
        except BaseException:
            process.kill()
            raise
    return process.returncode, "\n".join(tail)


class _DebootstrapTracker:
    """Turns debootstrap's ``I: Retrieving/Extracting/Unpacking/Configuring`` lines into a
    rough fraction: downloads are the first 40 %, installation the rest."""

    def __init__(self) -> None:
        self.retrieved = 0
        self.installed = 0
        self.total: int | None = None
        self.fraction = 0.0

    def feed(self, line: str) -> float:
        if line.startswith("I: Retrieving ") and self.total is None:
            self.retrieved += 1
            self.fraction = 0.4 * min(self.retrieved / _EXPECTED_PACKAGES, 1.0)
        elif line.startswith("I: Installing core packages"):
            self.total = max(self.retrieved - 3, 1)
        elif line.startswith(("I: Extracting ", "I: Unpacking ", "I: Configuring ")):
            self.installed += 1
            packages = self.total or _EXPECTED_PACKAGES
            self.fraction = 0.4 + 0.6 * min(self.installed / (2.6 * packages), 0.99)
        return self.fraction


def _strip(root: Path) -> None:
    """Removes what an image should not carry; Docker provides /dev, resolv.conf, hostname.
    apt's package lists stay: `apt-get install` in a sandbox works without an update first."""
    for pattern in (
        "var/cache/apt/archives/*.deb",
        "var/cache/apt/*.bin",
        "var/log/bootstrap.log",
        "dev/*",
    ):
        for path in root.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
    for name in ("etc/resolv.conf", "etc/hostname", "etc/hosts"):
        # Empty files: sandboxes get their own (runtimes seed or mount them).
        path = root / name
        if path.is_symlink() or path.exists():
            path.unlink()
        path.write_text("")
    root.chmod(0o755)


def _import(
    images: DockerImages,
    root: Path,
    ref: str,
    changes: list[str],
    on_progress: ProgressCallback,
) -> str:
    total = _tree_bytes(root)
    on_progress(BuildStep.IMPORT, 0.0, f"docker import as {ref}")
    with subprocess.Popen(
        ["tar", "-C", str(root), "--numeric-owner", "--one-file-system", "-c", "."],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as tar:

        def chunks() -> Iterator[bytes]:
            assert tar.stdout is not None
            sent = 0
            while chunk := tar.stdout.read(_CHUNK):
                sent += len(chunk)
                on_progress(BuildStep.IMPORT, min(sent / total, 0.99), f"{sent >> 20} MiB sent")
                yield chunk

        try:
            image_id = images.import_rootfs(chunks(), ref, changes)
        except BaseException:
            tar.kill()
            raise
        _, stderr = tar.communicate()
    if tar.returncode != 0:
        raise TemplateBuildError(
            f"tar of the root filesystem failed (exit {tar.returncode}): "
            f"{stderr.decode(errors='replace').strip()}"
        )
    on_progress(BuildStep.IMPORT, 1.0, f"imported {ref}")
    return image_id


def _tree_bytes(root: Path) -> int:
    total = 0
    for directory, _, files in os.walk(root):
        total += 512
        for name in files:
            with contextlib.suppress(OSError):
                total += 512 + os.lstat(os.path.join(directory, name)).st_size
    return max(total, 1)


def remove_tree(root: Path) -> None:
    # Never recurse into a mounted /proc, /sys or /dev that an interrupted debootstrap
    # may have left behind: unmount first, and keep the directory if that fails.
    mounts = _mounts_under(root)
    for mount in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", mount], check=False, capture_output=True)
    if _mounts_under(root):
        raise TemplateBuildError(
            f"cannot remove {root}: file systems are still mounted under it; unmount them"
        )
    shutil.rmtree(root, ignore_errors=True)


def _mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve()) + "/"
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    points = [line.split()[1].encode().decode("unicode_escape") for line in lines]
    return [point for point in points if point.startswith(prefix)]
