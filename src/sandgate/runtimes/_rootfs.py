"""Root file systems for sandboxes (both runtimes): a template image as a plain directory.

With a Docker engine, the template's image is exported once (``docker create`` + ``docker
export`` piped into ``tar``) to ``<cache>/<image id>/`` and its environment, working directory
and layer ids to ``<cache>/<image id>.json``; the JSON is written last, so a directory without
it is an interrupted export and is redone. An image whose layers begin with those of a tree
already here gets that tree hard-linked plus its remaining layers instead (``_tree_derive``).
The cache is keyed by image id, so a rebuilt template gets a fresh tree and running sandboxes
keep theirs.

Without Docker, the operator provides ``<cache>/by-name/<image ref with '/' and ':' as '_'>/``
(for example ``debootstrap`` + the provisioning of ``images/base/Dockerfile``, or a ``docker
export`` made elsewhere); see docs/operations.md.

Trust: image content is untrusted and only ever mounted read-only and ``nosuid`` into
sandboxes; extraction keeps numeric owners and never follows links outside the target (GNU tar
extracts members relative to ``-C``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandgate._atomic import write_atomic
from sandgate.errors import RuntimeUnavailable
from sandgate.runtimes._tree_derive import derive_tree, layer_dirs

if TYPE_CHECKING:
    import docker

__all__ = ["Rootfs", "by_name_dir", "resolve_rootfs"]


@dataclass(frozen=True)
class Rootfs:
    path: Path
    env: dict[str, str]
    workdir: str


def by_name_dir(cache: Path, image_ref: str) -> Path:
    return cache / "by-name" / image_ref.replace("/", "_").replace(":", "_")


def resolve_rootfs(
    image_ref: str, cache: Path, docker_base_url: str = "", image_id: str = ""
) -> Rootfs:
    """The directory tree of ``image_ref``, exporting it first if needed (slow, once).

    ``image_id`` is the image's content id when the caller has it on record (a template's
    build): a tree already exported for that id is used without asking the engine, which
    saves every cold create a round trip to Docker (~2 ms). An id names one content for
    ever, so nothing can go stale; a template rebuilt records its new id."""
    manual = by_name_dir(cache, image_ref)
    if manual.is_dir():
        return Rootfs(manual, *_read_meta(manual.with_name(manual.name + ".json")))
    known = image_id.removeprefix("sha256:")
    if known and "/" not in known and known not in (".", ".."):
        meta = cache / f"{known}.json"
        if meta.is_file() and (cache / known).is_dir():
            return Rootfs(cache / known, *_read_meta(meta))
    import docker.errors  # only here: a process that never exports does not load the SDK

    try:
        client = _client(docker_base_url)
    except docker.errors.DockerException:
        why = "no Docker engine answers"
        raise RuntimeUnavailable(_no_rootfs(image_ref, manual, why)) from None
    try:
        image = client.images.get(image_ref)
    except docker.errors.ImageNotFound:
        why = "Docker has no such image"
        raise RuntimeUnavailable(_no_rootfs(image_ref, manual, why)) from None
    except docker.errors.DockerException as exc:
        _forget_client(docker_base_url, client)
        raise RuntimeUnavailable(_no_rootfs(image_ref, manual, str(exc))) from None
    image_id = str(image.id).removeprefix("sha256:")
    target = cache / image_id
    meta = cache / f"{image_id}.json"
    layers = [str(layer) for layer in (image.attrs.get("RootFS") or {}).get("Layers", [])]
    config: dict[str, Any] = image.attrs.get("Config") or {}
    if meta.is_file():
        if layers and "layers" not in _read_json(meta):  # exported before layers were kept
            with contextlib.suppress(OSError):
                _write_meta(meta, config, layers)
        return Rootfs(target, *_read_meta(meta))
    cache.mkdir(parents=True, exist_ok=True)
    with _locked(cache / f".{image_id}.lock"):
        if not meta.is_file():
            if not _derive(client, cache, image.attrs, layers, target):
                _export(client, image_ref, target)
            _write_meta(meta, config, layers)
    return Rootfs(target, *_read_meta(meta))


def _derive(
    client: Any, cache: Path, attrs: dict[str, Any], layers: list[str], target: Path
) -> bool:
    """The tree from the exported tree sharing the longest prefix of layers, plus the rest
    (``_tree_derive``); ``False`` when there is none or the engine's layers cannot be read."""
    if not layers:
        return False
    best: tuple[int, Path] | None = None
    for meta in cache.glob("*.json"):
        known = _read_json(meta).get("layers")
        tree = meta.with_suffix("")
        if known is None:
            known = _backfill_layers(client, meta)
        if (
            isinstance(known, list)
            and known
            and layers[: len(known)] == known
            and (best is None or len(known) > best[0])
            and tree.is_dir()
        ):
            best = (len(known), tree)
    if best is None:
        return False
    dirs = layer_dirs(attrs)
    if dirs is None:
        return False
    return derive_tree(best[1], dirs[best[0] :], target)


def _backfill_layers(client: Any, meta: Path) -> list[str] | None:
    """The layers of a tree exported before they were recorded, from its image (named by the
    file) if the engine still has it; recorded for next time."""
    import docker.errors

    data = _read_json(meta)
    try:
        attrs = client.api.inspect_image(f"sha256:{meta.stem}")
    except docker.errors.DockerException:
        return None
    layers = [str(layer) for layer in (attrs.get("RootFS") or {}).get("Layers", [])]
    if not layers or not data:
        return None
    data["layers"] = layers
    with contextlib.suppress(OSError):
        _write_json(meta, data)
    return layers


_clients: dict[str, docker.DockerClient] = {}
_clients_lock = threading.Lock()


def _client(base_url: str) -> docker.DockerClient:
    """One Docker client per engine address, kept for the process: building one (and
    negotiating the API version) costs several ms that every cold create used to pay. The
    image id is still asked for each time, so a rebuilt template is never missed."""
    import docker

    with _clients_lock:
        client = _clients.get(base_url)
        if client is None:
            client = docker.DockerClient(base_url=base_url) if base_url else docker.from_env()
            _clients[base_url] = client
        return client


def _forget_client(base_url: str, client: docker.DockerClient) -> None:
    with _clients_lock:
        if _clients.get(base_url) is client:
            del _clients[base_url]
    with contextlib.suppress(Exception):
        client.close()


def _export(client: Any, image_ref: str, target: Path) -> None:
    tar = shutil.which("tar")
    if tar is None:
        raise RuntimeUnavailable("rootfs export needs GNU tar: apt-get install tar")
    shutil.rmtree(target, ignore_errors=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{target.name[:12]}-", dir=target.parent))
    container = client.api.create_container(image_ref, command=["true"], network_disabled=True)
    try:
        # As root, owners and extended attributes (file capabilities) are kept as exported.
        proc = subprocess.Popen(
            [tar, "-x", "--numeric-owner", "--no-same-owner", "-C", str(scratch)]
            if os.geteuid() != 0
            else [
                tar,
                "-x",
                "--numeric-owner",
                "--xattrs",
                "--xattrs-include=*",
                "-C",
                str(scratch),
            ],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdin is not None
        try:
            for chunk in client.api.export(container["Id"]):
                proc.stdin.write(chunk)
        finally:
            proc.stdin.close()
        stderr = proc.stderr.read() if proc.stderr is not None else b""
        if proc.wait() != 0:
            raise RuntimeUnavailable(
                f"rootfs export of {image_ref} failed: {stderr.decode(errors='replace')[:500]}"
            )
        # Docker's export leaves its own markers; a sandbox gets its own hosts/hostname.
        with contextlib.suppress(FileNotFoundError):
            (scratch / ".dockerenv").unlink()
        scratch.chmod(0o755)
        scratch.rename(target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    finally:
        with contextlib.suppress(Exception):
            client.api.remove_container(container["Id"], force=True)


def _write_meta(meta: Path, config: dict[str, Any], layers: list[str]) -> None:
    env = dict(item.split("=", 1) for item in config.get("Env") or [] if "=" in item)
    _write_json(meta, {"env": env, "workdir": config.get("WorkingDir") or "/", "layers": layers})


def _write_json(meta: Path, data: dict[str, Any]) -> None:
    # Two processes may backfill the same record at once: each writes a temp file of its own.
    write_atomic(meta, json.dumps(data), mode=0o644)


def _read_json(meta: Path) -> dict[str, Any]:
    try:
        data = json.loads(meta.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_meta(meta: Path) -> tuple[dict[str, str], str]:
    data = _read_json(meta)
    if not data:
        return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, "/"
    return {str(k): str(v) for k, v in data.get("env", {}).items()}, str(data.get("workdir", "/"))


@contextlib.contextmanager
def _locked(path: Path) -> Any:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _no_rootfs(image_ref: str, manual: Path, why: str) -> str:
    return (
        f"bwrap runtime: no root file system for {image_ref} ({why}). Build the template on a "
        f"host with Docker, or place its root file system at {manual} (e.g. `docker export "
        f"$(docker create {image_ref}) | tar -x -C {manual}`); see docs/operations.md"
    )
