"""Images pushed for E2B's v1 template builds: blob uploads, manifests, and the archive that
loads one into the Docker engine.

E2B CLI 1.x builds a template by ``docker push``-ing ``<registry>/e2b/custom-envs/<templateID>:
<buildID>`` and then asking for the build. This module keeps what such a push sends, one
directory per template under ``<home>/templates/registry/<templateID>/``::

    uploads/<uuid>        an upload in progress (appended to by PATCH)
    blobs/<sha256 hex>    a finished blob, its digest verified
    manifests/<hex>       a manifest, by the digest of its bytes
    tags/<reference>      the manifest digest a tag (a build id) names

Trust: whoever pushes is a team's API key holder, pushing into its own template's repository
(the HTTP edge, ``api/e2b/registry.py``, checks that). What is enforced here: a blob is stored
only under the digest of its bytes (computed here, never taken from the client); every file is
written to a temporary name and renamed into place, so a crash leaves no half blob or manifest;
a repository holds at most ``max_bytes`` (uploads included); a manifest is a single-platform
Docker schema 2 or OCI image manifest for this host's architecture whose every blob is present.
Nothing here runs the image; the build does, in the builder's isolation.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import platform
import re
import secrets
import shutil
import tarfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sandgate._atomic import write_atomic
from sandgate.errors import InvalidRequest, NotFound, PayloadTooLarge, SandgateError

__all__ = [
    "CONFIG_TYPES",
    "LAYER_TYPES",
    "LIST_TYPES",
    "MANIFEST_TYPES",
    "PushRefused",
    "PushStore",
    "StoredManifest",
]

DOCKER_MANIFEST: Final = "application/vnd.docker.distribution.manifest.v2+json"
OCI_MANIFEST: Final = "application/vnd.oci.image.manifest.v1+json"
MANIFEST_TYPES: Final = frozenset({DOCKER_MANIFEST, OCI_MANIFEST})
LIST_TYPES: Final = frozenset(
    {
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json",
    }
)
CONFIG_TYPES: Final = frozenset(
    {"application/vnd.docker.container.image.v1+json", "application/vnd.oci.image.config.v1+json"}
)
#: Layer formats ``docker load`` reads (plain or gzip'ed tar).
LAYER_TYPES: Final = frozenset(
    {
        "application/vnd.docker.image.rootfs.diff.tar.gzip",
        "application/vnd.oci.image.layer.v1.tar",
        "application/vnd.oci.image.layer.v1.tar+gzip",
    }
)
MAX_MANIFEST_BYTES: Final = 4 * 1024 * 1024
MAX_CONFIG_BYTES: Final = 8 * 1024 * 1024
MAX_LAYERS: Final = 256
_DIGEST: Final = re.compile(r"sha256:([0-9a-f]{64})")
_UPLOAD: Final = re.compile(r"[0-9a-f]{32}")
_TAG: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_REPO: Final = re.compile(r"[a-z0-9]{1,64}")
_CHUNK: Final = 1024 * 1024
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ARCH: Final = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


class PushRefused(Exception):
    """A registry request refused: ``oci`` is the distribution spec's error code (what
    ``docker push`` shows), ``error`` the Sandgate error (its status and message)."""

    def __init__(self, oci: str, error: SandgateError) -> None:
        super().__init__(error.message)
        self.oci = oci
        self.error = error


@dataclass(frozen=True, slots=True)
class StoredManifest:
    body: bytes
    media_type: str
    digest: str


def host_architecture() -> str:
    machine = platform.machine().lower()
    return _ARCH.get(machine, machine)


def check_digest(digest: str) -> str:
    """The hex part of a ``sha256:<hex>`` digest; refuses anything else (other algorithms)."""
    found = _DIGEST.fullmatch(digest)
    if found is None:
        raise PushRefused(
            "DIGEST_INVALID", InvalidRequest(f"digest {digest[:100]!r} is not sha256:<64 hex>")
        )
    return found.group(1)


class PushStore:
    """The pushed repositories of all templates; ``max_bytes`` caps each one."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self._root = root
        self._max = max_bytes
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    @property
    def max_bytes(self) -> int:
        return self._max

    def _repo(self, template_id: str) -> Path:
        # SECURITY: the id becomes a path component; only [a-z0-9] ever reaches the disk.
        if not _REPO.fullmatch(template_id):
            raise PushRefused("NAME_INVALID", InvalidRequest("invalid repository name"))
        return self._root / template_id

    def _dir(self, template_id: str, kind: str) -> Path:
        path = self._repo(template_id) / kind
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    def usage(self, template_id: str) -> int:
        """Bytes the repository holds, uploads in progress included."""
        total = 0
        repo = self._repo(template_id)
        if not repo.is_dir():
            return 0
        for path in repo.rglob("*"):
            if path.is_file():
                total += path.stat().st_size
        return total

    def forget(self, template_id: str) -> None:
        """Removes everything pushed for the template (it was deleted)."""
        shutil.rmtree(self._repo(template_id), ignore_errors=True)

    # -- blobs ----------------------------------------------------------------------------

    def blob(self, template_id: str, digest: str) -> Path | None:
        path = self._repo(template_id) / "blobs" / check_digest(digest)
        return path if path.is_file() else None

    def _blob_or_refuse(self, template_id: str, digest: str, what: str) -> Path:
        path = self.blob(template_id, digest)
        if path is None:
            raise PushRefused(
                "MANIFEST_BLOB_UNKNOWN",
                InvalidRequest(f"{what} {digest} was not pushed to this repository: push it first"),
            )
        return path

    # -- uploads --------------------------------------------------------------------------

    def new_upload(self, template_id: str) -> str:
        upload = secrets.token_hex(16)
        (self._dir(template_id, "uploads") / upload).touch(mode=0o600)
        return upload

    def upload_size(self, template_id: str, upload: str) -> int:
        return self._upload(template_id, upload).stat().st_size

    def _upload(self, template_id: str, upload: str) -> Path:
        path = self._repo(template_id) / "uploads" / upload
        if not _UPLOAD.fullmatch(upload) or not path.is_file():
            raise PushRefused(
                "BLOB_UPLOAD_UNKNOWN",
                NotFound(f"upload {upload[:40]} not found (it finished, failed or never began)"),
            )
        return path

    def cancel(self, template_id: str, upload: str) -> None:
        self._upload(template_id, upload).unlink(missing_ok=True)

    async def append(
        self, template_id: str, upload: str, chunks: AsyncIterator[bytes], start: int | None
    ) -> int:
        """Appends a request body to the upload; ``start`` is where the client says it
        begins (``Content-Range``), checked against what the upload holds. Returns the new
        size. Over the repository's cap the upload is dropped (a push must start again)."""
        path = self._upload(template_id, upload)
        async with self._locks.setdefault((template_id, upload), asyncio.Lock()):
            try:
                size = path.stat().st_size
                if start is not None and start != size:
                    raise PushRefused(
                        "BLOB_UPLOAD_INVALID",
                        InvalidRequest(f"this chunk starts at {start}, the upload holds {size}"),
                    )
                budget = self._max - self.usage(template_id)
                written = 0
                with path.open("ab") as sink:
                    async for chunk in chunks:
                        written += len(chunk)
                        if written > budget:
                            sink.close()
                            path.unlink(missing_ok=True)
                            raise PushRefused("DENIED", self._too_large(template_id))
                        sink.write(chunk)
                return size + written
            finally:
                self._locks.pop((template_id, upload), None)

    def _too_large(self, template_id: str) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"the push to template {template_id} is larger than "
            f"{self._max // (1024 * 1024)} MiB (templates.max_push_mib); push a smaller image "
            "or ask the operator to raise the limit"
        )

    async def finish(self, template_id: str, upload: str, digest: str) -> None:
        """Verifies the upload's sha256 and stores it as the blob ``digest``; a mismatch drops
        the upload (``DIGEST_INVALID``)."""
        hex_digest = check_digest(digest)
        path = self._upload(template_id, upload)
        actual = await asyncio.to_thread(_sha256_file, path)
        if actual != hex_digest:
            path.unlink(missing_ok=True)
            raise PushRefused(
                "DIGEST_INVALID",
                InvalidRequest(
                    f"the uploaded content has digest sha256:{actual}, not {digest}: push again"
                ),
            )
        target = self._dir(template_id, "blobs") / hex_digest
        await asyncio.to_thread(_fsync, path)
        os.replace(path, target)  # atomic: a blob is whole or absent

    # -- manifests ------------------------------------------------------------------------

    def put_manifest(
        self, template_id: str, reference: str, body: bytes, content_type: str
    ) -> StoredManifest:
        """Checks and stores a manifest under its digest and, when ``reference`` is a tag,
        points the tag at it."""
        if len(body) > MAX_MANIFEST_BYTES:
            raise PushRefused(
                "MANIFEST_INVALID", PayloadTooLarge("the manifest is larger than 4 MiB")
            )
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if reference.startswith("sha256:") and reference != digest:
            raise PushRefused(
                "DIGEST_INVALID",
                InvalidRequest(f"the manifest's digest is {digest}, not {reference}"),
            )
        media_type = self._check_manifest(template_id, body, content_type.split(";")[0].strip())
        self._write(self._dir(template_id, "manifests") / digest[7:], body)
        if not reference.startswith("sha256:"):
            self._write(self._dir(template_id, "tags") / _check_tag(reference), digest.encode())
        return StoredManifest(body, media_type, digest)

    def manifest(self, template_id: str, reference: str) -> StoredManifest | None:
        repo = self._repo(template_id)
        if reference.startswith("sha256:"):
            digest = "sha256:" + check_digest(reference)
        else:
            tag = repo / "tags" / _check_tag(reference)
            if not tag.is_file():
                return None
            digest = tag.read_text()
        path = repo / "manifests" / digest[7:]
        if not path.is_file():
            return None
        body = path.read_bytes()
        media_type = json.loads(body).get("mediaType") or OCI_MANIFEST
        return StoredManifest(body, str(media_type), digest)

    def _check_manifest(self, template_id: str, body: bytes, content_type: str) -> str:
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, ValueError):
            data = None
        if not isinstance(data, dict):
            raise _invalid("the manifest is not a JSON object")
        media_type = data.get("mediaType") or content_type
        if media_type in LIST_TYPES or "manifests" in data:
            raise _invalid(
                "manifest lists and image indexes are not supported: push a single-platform "
                "image (`docker build` without --platform lists, or `docker buildx build "
                "--platform linux/amd64 --load`, then `docker push`)"
            )
        if media_type not in MANIFEST_TYPES or data.get("schemaVersion") != 2:
            raise _invalid(
                f"unsupported manifest type {str(media_type)[:100]!r}: push a Docker image "
                "manifest (schema 2) or an OCI image manifest"
            )
        config = data.get("config")
        layers = data.get("layers")
        if not isinstance(config, dict) or not isinstance(layers, list) or not layers:
            raise _invalid("the manifest needs a config and at least one layer")
        if len(layers) > MAX_LAYERS:
            raise _invalid(f"the image has more than {MAX_LAYERS} layers; squash some")
        if config.get("mediaType") not in CONFIG_TYPES:
            raise _invalid(f"unsupported config type {str(config.get('mediaType'))[:100]!r}")
        config_path = self._described(template_id, config, "config")
        for layer in layers:
            if not isinstance(layer, dict) or layer.get("mediaType") not in LAYER_TYPES:
                kind = layer.get("mediaType") if isinstance(layer, dict) else None
                raise _invalid(
                    f"unsupported layer type {str(kind)[:100]!r}: push plain or gzip'ed tar "
                    "layers (the default of docker push)"
                )
            self._described(template_id, layer, "layer")
        self._check_config(config_path, len(layers))
        return str(media_type)

    def _described(self, template_id: str, descriptor: dict[str, Any], what: str) -> Path:
        digest = descriptor.get("digest")
        size = descriptor.get("size")
        if not isinstance(digest, str) or not isinstance(size, int):
            raise _invalid(f"a {what} descriptor needs a digest and a size")
        path = self._blob_or_refuse(template_id, digest, what)
        if path.stat().st_size != size:
            raise _invalid(f"{what} {digest} is {path.stat().st_size} bytes, not {size}")
        return path

    def _check_config(self, path: Path, layers: int) -> None:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise _invalid("the image config is larger than 8 MiB")
        try:
            config = json.loads(path.read_bytes())
        except (UnicodeDecodeError, ValueError):
            config = None
        if not isinstance(config, dict):
            raise _invalid("the image config is not a JSON object")
        system = config.get("os")
        arch = config.get("architecture")
        if system != "linux" or arch != host_architecture():
            raise _invalid(
                f"the image is for {system}/{arch}; this server runs linux/"
                f"{host_architecture()} images: build for that platform and push again"
            )
        rootfs = config.get("rootfs")
        diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
        if not isinstance(diff_ids, list) or len(diff_ids) != layers:
            raise _invalid("the image config's rootfs.diff_ids do not match its layers")

    def _write(self, path: Path, data: bytes) -> None:
        write_atomic(path, data, mode=0o644)

    def image_env(self, template_id: str, reference: str) -> list[tuple[str, str]]:
        """The pushed image's ``ENV`` (``config.Env``), names checked, for the template."""
        stored = self.manifest(template_id, reference)
        if stored is None:
            return []
        config_hex = check_digest(json.loads(stored.body)["config"]["digest"])
        config = json.loads((self._repo(template_id) / "blobs" / config_hex).read_bytes())
        found: list[tuple[str, str]] = []
        for item in (config.get("config") or {}).get("Env") or []:
            name, sep, value = str(item).partition("=")
            if sep and _ENV_NAME.fullmatch(name):
                found.append((name, value))
        return found

    # -- loading --------------------------------------------------------------------------

    def archive(self, template_id: str, reference: str, tag: str) -> Iterator[bytes]:
        """A ``docker load`` archive (``manifest.json``, the config, the layers as pushed) of
        the pushed image ``reference``, tagged ``tag``, streamed from the stored blobs.
        Raises ``PushRefused`` (``MANIFEST_UNKNOWN``) when nothing was pushed."""
        stored = self.manifest(template_id, reference)
        if stored is None:
            raise PushRefused("MANIFEST_UNKNOWN", NotFound(f"no image pushed as {reference}"))
        data = json.loads(stored.body)
        config_hex = check_digest(data["config"]["digest"])
        layer_hexes = [check_digest(layer["digest"]) for layer in data["layers"]]
        blobs = self._repo(template_id) / "blobs"
        index = [
            {
                "Config": f"{config_hex}.json",
                "RepoTags": [tag],
                "Layers": [f"{h}/layer.tar" for h in layer_hexes],
            }
        ]
        return _tar_stream(
            [
                ("manifest.json", json.dumps(index).encode()),
                (f"{config_hex}.json", blobs / config_hex),
                *[(f"{h}/layer.tar", blobs / h) for h in dict.fromkeys(layer_hexes)],
            ]
        )


def _tar_stream(members: list[tuple[str, bytes | Path]]) -> Iterator[bytes]:
    """A tar archive of ``members`` (bytes or files), produced chunk by chunk."""
    for name, content in members:
        info = tarfile.TarInfo(name)
        info.mode = 0o644
        info.size = len(content) if isinstance(content, bytes) else content.stat().st_size
        yield info.tobuf(format=tarfile.PAX_FORMAT)
        if isinstance(content, bytes):
            yield content
        else:
            with content.open("rb") as source:
                while chunk := source.read(_CHUNK):
                    yield chunk
        if info.size % tarfile.BLOCKSIZE:
            yield b"\0" * (tarfile.BLOCKSIZE - info.size % tarfile.BLOCKSIZE)
    yield b"\0" * (2 * tarfile.BLOCKSIZE)


def _invalid(message: str) -> PushRefused:
    return PushRefused("MANIFEST_INVALID", InvalidRequest(message))


def _check_tag(tag: str) -> str:
    if not _TAG.fullmatch(tag):
        raise PushRefused(
            "TAG_INVALID",
            InvalidRequest(f"invalid tag {tag[:130]!r}: tag the image with its build id"),
        )
    return tag


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    with path.open("rb") as source:
        os.fsync(source.fileno())
