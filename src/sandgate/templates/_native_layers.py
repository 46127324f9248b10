"""Template layers without a container engine: one overlay directory per step.

Layout under ``rootfs_dir`` (the bwrap runtime's root file system cache)::

    layers/<key>/        the files one step changed (an overlayfs upper directory: deletions
                         are whiteouts, replaced directories opaque), kept for reuse
    layers/<key>.json    {"parent": <key> | null, "tree": <starting tree> | null}, written last
    by-name/<ref>/       a built template: the flattened tree, as for the shipped templates
    by-name/<ref>.json   its environment and labels

A step mounts ``overlay(lower = parent layers…, starting tree; upper = a new directory)``, runs
its script there under bubblewrap, unmounts and renames the upper directory into place, so a
later build with the same prefix of steps reuses it; ``docker build``'s cache semantics without
Docker. The template's tree is the read-only overlay of all its layers, copied once.

Trust: build steps are the team's code. They run as root of a bubblewrap sandbox over the
build's tree only (new mount, PID, IPC and UTS namespaces, Docker's default capability set,
``/proc/sys`` and ``/proc/sysrq-trigger`` read-only, no ``/sys``), on the host's network so
package installs work: weaker than the sandbox wall, as docs/threat-model.md says. The host only
writes into a tree through ``_inside`` (never following the tree's links out).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sandgate._atomic import write_atomic
from sandgate.runtimes import by_name_dir

from ._layers import LAYER_KEY_LABEL, TAIL_LINES, BuildLog, FinalConfig, StepFailed
from ._plan import BASE_STEP, FINALIZE_STEP, Action
from ._rootfs import remove_tree
from .errors import TemplateBuildError

__all__ = ["NativeLayers"]

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Docker's default capability set: what a RUN step gets there, so builds behave alike.
_CAPS = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
)
#: Switches to the step's user inside the tree (runuser, else su), as ``docker run -u``.
_AS_USER = (
    'if [ "$SANDGATE_STEP_USER" = root ]; then exec /bin/sh -c "$1"; fi\n'
    "if command -v runuser >/dev/null 2>&1; then\n"
    '  exec runuser -u "$SANDGATE_STEP_USER" -- /bin/sh -c "$1"\n'
    "fi\n"
    'exec su -s /bin/sh "$SANDGATE_STEP_USER" -c "$1"\n'
)


class NativeLayers:
    engine = "native"

    def __init__(self, rootfs_dir: Path) -> None:
        self._dir = rootfs_dir
        self._layers = rootfs_dir / "layers"

    # -- LayerBackend ---------------------------------------------------------------------

    def start(self, image: str | None, tree_ref: str | None, log: BuildLog) -> tuple[str, str]:
        ref = image or tree_ref or ""
        tree = by_name_dir(self._dir, ref)
        if not (tree / "etc").is_dir():
            if image is not None:
                raise StepFailed(
                    BASE_STEP,
                    f"image {image} is not available: this server has no container engine to "
                    f"pull it, and no root file system for it is at {tree} (export one there: "
                    f"`docker export $(docker create {image}) | tar -x -C {tree}`)",
                )
            raise StepFailed(BASE_STEP, f"template image {ref} has no root file system at {tree}")
        return f"tree:{tree}", f"tree:{tree}"

    def cached(self, key: str) -> str | None:
        meta = self._layers / f"{key}.json"
        return key if meta.is_file() and (self._layers / key).is_dir() else None

    def run(
        self,
        parent: str,
        key: str,
        action: Action,
        script: str,
        staging: Path | None,
        log: Callable[[str], None],
    ) -> str:
        if os.geteuid() != 0:
            raise StepFailed(action.step, "engine-less template builds run as root")
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            raise StepFailed(action.step, "bubblewrap not found: apt-get install bubblewrap")
        self._layers.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=self._layers))
        upper = scratch / "upper"
        work = scratch / "work"
        merged = scratch / "merged"
        for path in (upper, work, merged):
            path.mkdir()
        try:
            with _overlay(self._lower(parent), merged, upper=upper, work=work):
                if staging is not None:
                    target = _inside(merged, "/.sandgate-copy")
                    if os.path.lexists(target):
                        raise StepFailed(action.step, "the image already has /.sandgate-copy")
                    subprocess.run(["cp", "-a", str(staging), str(target)], check=True)
                code, tail = _run(
                    _argv(bwrap, merged, action, script), lambda line: log(line[:2000])
                )
            if code != 0:
                output = "\n".join(tail)
                raise StepFailed(
                    action.step, f"step {action.step} failed (exit {code}); last output:\n{output}"
                )
            parent_key = None if parent.startswith("tree:") else parent
            tree = parent.removeprefix("tree:") if parent.startswith("tree:") else None
            target_dir = self._layers / key
            if target_dir.exists():
                remove_tree(target_dir)
            upper.rename(target_dir)
            _write_json(self._layers / f"{key}.json", {"parent": parent_key, "tree": tree})
        except subprocess.CalledProcessError as exc:
            raise StepFailed(action.step, f"cannot stage the files: {exc}") from None
        finally:
            remove_tree(scratch)
        return key

    def load(self, archive: Iterator[bytes], tag: str, log: BuildLog) -> None:
        raise StepFailed(
            BASE_STEP,
            "a pushed image (E2B's v1 template build, `e2b template build` of CLI 1.x) is "
            "loaded into a Docker engine, and this server has none: start dockerd (or set "
            "runtime.docker.base_url) and build again, or build with the v2 template API "
            "(Template().from_dockerfile(...) in the SDKs)",
        )

    def finalize(
        self, top: str, repository: str, key: str, config: FinalConfig, labels: dict[str, str]
    ) -> tuple[str, str]:
        ref = f"{repository}:{key[:12]}"
        target = by_name_dir(self._dir, ref)
        meta = target.with_name(target.name + ".json")
        lower = self._lower(top)
        if not any(
            os.path.lexists(Path(layer) / p)
            for layer in lower
            for p in ("usr/bin/python3", "usr/local/bin/python3", "bin/python3")
        ):
            raise StepFailed(
                FINALIZE_STEP,
                "the template has no python3, which Sandgate's in-sandbox agent needs: add "
                "it (e.g. .apt_install('python3')) or start from an image that has it",
            )
        if not (meta.is_file() and target.is_dir()):
            target.parent.mkdir(parents=True, exist_ok=True)
            scratch = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
            merged = Path(tempfile.mkdtemp(prefix=".merged-", dir=target.parent))
            try:
                with _overlay(lower, merged):
                    result = subprocess.run(
                        ["cp", "-a", "--reflink=auto", f"{merged}/.", str(scratch)],
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                if result.returncode != 0:
                    raise StepFailed(
                        FINALIZE_STEP, f"cannot flatten the layers: {result.stderr[:500]}"
                    )
                scratch.chmod(0o755)
                if target.exists():
                    remove_tree(target)
                scratch.rename(target)
            finally:
                remove_tree(scratch)
                merged.rmdir()
            env = dict(config.envs)
            env.setdefault("PATH", _PATH)
            _write_json(
                meta,
                {
                    "env": env,
                    "workdir": "/",
                    "labels": {**labels, LAYER_KEY_LABEL: key},
                    "size": 0,
                },
            )
        return ref, f"native:{key}"

    # -- helpers --------------------------------------------------------------------------

    def _lower(self, handle: str) -> list[str]:
        """Lower directories for ``handle``, topmost first, ending with the starting tree."""
        if handle.startswith("tree:"):
            return [handle.removeprefix("tree:")]
        chain: list[str] = []
        key: str | None = handle
        while key is not None:
            meta = _read_json(self._layers / f"{key}.json")
            if not meta:
                raise TemplateBuildError(f"layer {key[:12]} is missing: build again")
            chain.append(str(self._layers / key))
            tree = meta.get("tree")
            key = meta.get("parent")
            if tree is not None:
                chain.append(str(tree))
                break
        return chain


def _argv(bwrap: str, root: Path, action: Action, script: str) -> list[str]:
    # SECURITY: the step's fresh /proc is the host kernel's; its /proc/sys and sysrq trigger
    # are bound read-only over it. A kernel without a sysrq trigger (built without
    # CONFIG_MAGIC_SYSRQ, or a sandboxed kernel) has none in the fresh /proc either, so
    # "-try" skips only what is not there to protect.
    argv = [
        bwrap,
        "--bind", str(root), "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--ro-bind", "/proc/sys", "/proc/sys",
        "--ro-bind-try", "/proc/sysrq-trigger", "/proc/sysrq-trigger",
        "--unshare-pid", "--unshare-ipc", "--unshare-uts",
        "--die-with-parent", "--new-session",
        "--cap-drop", "ALL",
    ]  # fmt: skip
    for cap in _CAPS:
        argv += ["--cap-add", cap]
    resolv = Path("/etc/resolv.conf")
    if resolv.exists():
        argv += ["--ro-bind", str(resolv.resolve()), "/etc/resolv.conf"]
    argv += ["--chdir", "/", "--clearenv"]
    env = {"PATH": _PATH, "HOME": "/root", **dict(action.env)}
    env["SANDGATE_STEP_USER"] = action.user
    for name, value in env.items():
        argv += ["--setenv", name, value]
    return [*argv, "/bin/sh", "-c", _AS_USER, "step", script]


def _run(argv: list[str], on_line: Callable[[str], None]) -> tuple[int, list[str]]:
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
                tail = [*tail[-(TAIL_LINES - 1) :], line]
                on_line(line)
        except BaseException:
            process.kill()
            raise
    return process.returncode, tail


@contextlib.contextmanager
def _overlay(
    lower: list[str], merged: Path, *, upper: Path | None = None, work: Path | None = None
) -> Iterator[None]:
    """Mounts the overlay at ``merged`` (read-only without ``upper``) for the block."""
    if len(lower) == 1 and upper is None:
        options = f"lowerdir={lower[0]}:{lower[0]}"  # one lower needs an upper or a second
    else:
        options = "lowerdir=" + ":".join(lower)
    if upper is not None and work is not None:
        options += f",upperdir={upper},workdir={work}"
    mounted = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, str(merged)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        raise TemplateBuildError(f"cannot mount the build's layers: {mounted.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", "--lazy", str(merged)], check=False, capture_output=True)


def _inside(root: Path, absolute: str) -> Path:
    candidate = (root / absolute.lstrip("/")).resolve()
    real_root = root.resolve()
    if candidate != real_root and not candidate.is_relative_to(real_root):
        raise TemplateBuildError(f"path {absolute!r} leaves the image's root")
    return candidate


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data), mode=0o644)
