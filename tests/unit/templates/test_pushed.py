"""The pushed-image store of v1 template builds (``templates._pushed``): uploads are stored only
under the digest of their bytes, atomically and within the repository's cap; manifests must be
single-platform images for this host whose blobs are present; the ``docker load`` archive is
a tar with the layout the engine reads."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandgate.templates import PushRefused, PushStore
from sandgate.templates._pushed import DOCKER_MANIFEST, host_architecture

REPO = "abc123"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def _push_blob(store: PushStore, data: bytes, *parts: bytes) -> str:
    upload = store.new_upload(REPO)
    for part in parts or (data,):
        asyncio.run(store.append(REPO, upload, _chunks(part), None))
    digest = _digest(data)
    asyncio.run(store.finish(REPO, upload, digest))
    return digest


def _layer(content: bytes) -> tuple[bytes, str]:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("marker")
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    return gzip.compress(raw.getvalue()), _digest(raw.getvalue())


def _image(store: PushStore, **config_overrides: object) -> bytes:
    layer, diff_id = _layer(b"hello")
    layer_digest = _push_blob(store, layer)
    config = {
        "architecture": host_architecture(),
        "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin", "GREETING=hi there", "bad name=x"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        **config_overrides,
    }
    config_bytes = json.dumps(config).encode()
    config_digest = _push_blob(store, config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST,
        "config": {
            "mediaType": "application/vnd.docker.container.image.v1+json",
            "digest": config_digest,
            "size": len(config_bytes),
        },
        "layers": [
            {
                "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                "digest": layer_digest,
                "size": len(layer),
            }
        ],
    }
    return json.dumps(manifest).encode()


def _refusal(call: object) -> PushRefused:
    with pytest.raises(PushRefused) as caught:
        call()  # type: ignore[operator]
    return caught.value


def test_a_chunked_upload_is_stored_under_its_verified_digest(tmp_path: Path) -> None:
    store = PushStore(tmp_path, 1024 * 1024)
    digest = _push_blob(store, b"hello world", b"hello ", b"world")
    found = store.blob(REPO, digest)
    assert found is not None and found.read_bytes() == b"hello world"
    assert not list((tmp_path / REPO / "uploads").iterdir())


def test_a_wrong_digest_is_refused_and_nothing_is_kept(tmp_path: Path) -> None:
    store = PushStore(tmp_path, 1024 * 1024)
    upload = store.new_upload(REPO)
    asyncio.run(store.append(REPO, upload, _chunks(b"real bytes"), None))
    claimed = _digest(b"other bytes")
    refused = _refusal(lambda: asyncio.run(store.finish(REPO, upload, claimed)))
    assert refused.oci == "DIGEST_INVALID" and refused.error.status == 400
    assert store.blob(REPO, claimed) is None
    assert not list((tmp_path / REPO / "uploads").iterdir())
    assert _refusal(lambda: store.blob(REPO, "md5:abc")).oci == "DIGEST_INVALID"


def test_a_chunk_at_the_wrong_offset_is_refused(tmp_path: Path) -> None:
    store = PushStore(tmp_path, 1024 * 1024)
    upload = store.new_upload(REPO)
    asyncio.run(store.append(REPO, upload, _chunks(b"abc"), 0))
    refused = _refusal(lambda: asyncio.run(store.append(REPO, upload, _chunks(b"d"), 1)))
    assert refused.oci == "BLOB_UPLOAD_INVALID"
    assert asyncio.run(store.append(REPO, upload, _chunks(b"d"), 3)) == 4


def test_the_repository_cap_drops_an_upload_that_passes_it(tmp_path: Path) -> None:
    store = PushStore(tmp_path, 100)
    upload = store.new_upload(REPO)
    refused = _refusal(
        lambda: asyncio.run(store.append(REPO, upload, _chunks(b"x" * 60, b"y" * 60), None))
    )
    assert refused.oci == "DENIED" and refused.error.status == 413
    assert "templates.max_push_mib" in refused.error.message
    assert _refusal(lambda: store.upload_size(REPO, upload)).oci == "BLOB_UPLOAD_UNKNOWN"
    assert store.usage(REPO) == 0


def test_repository_and_upload_names_never_leave_the_store(tmp_path: Path) -> None:
    store = PushStore(tmp_path / "store", 1024)
    assert _refusal(lambda: store.new_upload("../escape")).oci == "NAME_INVALID"
    assert _refusal(lambda: store.upload_size(REPO, "../../x")).oci == "BLOB_UPLOAD_UNKNOWN"
    assert not (tmp_path / "escape").exists()


def test_a_manifest_is_stored_by_digest_and_tag(tmp_path: Path) -> None:
    store = PushStore(tmp_path, 1024 * 1024)
    body = _image(store)
    stored = store.put_manifest(REPO, "build-1", body, DOCKER_MANIFEST)
    assert stored.digest == _digest(body)
    for reference in ("build-1", stored.digest):
        found = store.manifest(REPO, reference)
        assert found is not None and found.body == body and found.media_type == DOCKER_MANIFEST
    assert store.manifest(REPO, "build-2") is None
    assert store.image_env(REPO, "build-1") == [("PATH", "/usr/bin:/bin"), ("GREETING", "hi there")]


def test_manifests_that_cannot_be_built_are_refused(tmp_path: Path) -> None:
    store = PushStore(tmp_path, 1024 * 1024)
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [],
        }
    ).encode()
    listed = _refusal(lambda: store.put_manifest(REPO, "b", index, ""))
    assert listed.oci == "MANIFEST_INVALID" and "single-platform" in listed.error.message

    body = json.loads(_image(store))
    body["layers"][0]["digest"] = _digest(b"never pushed")
    missing = _refusal(lambda: store.put_manifest(REPO, "b", json.dumps(body).encode(), ""))
    assert missing.oci == "MANIFEST_BLOB_UNKNOWN" and "push it first" in missing.error.message

    foreign = _image(store, architecture="s390x")
    arch = _refusal(lambda: store.put_manifest(REPO, "b", foreign, DOCKER_MANIFEST))
    assert arch.oci == "MANIFEST_INVALID" and "s390x" in arch.error.message

    good = _image(store)
    wrong = _refusal(lambda: store.put_manifest(REPO, _digest(b"x"), good, DOCKER_MANIFEST))
    assert wrong.oci == "DIGEST_INVALID"
    assert _refusal(lambda: store.put_manifest(REPO, "b", b"[1]", "")).oci == "MANIFEST_INVALID"
    assert store.manifest(REPO, "b") is None


def test_the_load_archive_has_the_layout_docker_load_reads(tmp_path: Path) -> None:
    store = PushStore(tmp_path, 1024 * 1024)
    body = _image(store)
    store.put_manifest(REPO, "build-1", body, DOCKER_MANIFEST)
    data = b"".join(store.archive(REPO, "build-1", "sandgate/pushed-x:build-1"))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        index = json.loads(tar.extractfile("manifest.json").read())  # type: ignore[union-attr]
        manifest = json.loads(body)
        config_hex = manifest["config"]["digest"][7:]
        layer_hex = manifest["layers"][0]["digest"][7:]
        assert index == [
            {
                "Config": f"{config_hex}.json",
                "RepoTags": ["sandgate/pushed-x:build-1"],
                "Layers": [f"{layer_hex}/layer.tar"],
            }
        ]
        layer = tar.extractfile(f"{layer_hex}/layer.tar").read()  # type: ignore[union-attr]
        assert _digest(layer)[7:] == layer_hex
    assert _refusal(lambda: store.archive(REPO, "nothing", "t")).oci == "MANIFEST_UNKNOWN"
    store.forget(REPO)
    assert store.usage(REPO) == 0
