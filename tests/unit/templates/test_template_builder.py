"""Source selection and idempotency of template builds, against the real Docker engine.

Uses throw-away images (a one-file ``docker import`` for a starting image, a LABEL-only
Dockerfile for the template) under a unique namespace, so nothing here touches the real
``sandgate/*`` images or needs the network.
"""

from __future__ import annotations

import io
import shutil
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import pytest

from sandgate.templates import (
    BuildStep,
    Source,
    TemplateBuilder,
    TemplateBuildError,
    TemplateState,
)
from sandgate.templates._digest import package_list, rootfs_digest
from sandgate.templates._docker import DockerImages
from sandgate.templates._rootfs import SUITE, VARIANT
from sandgate.templates._sources import ROOTFS_DIGEST_LABEL, BaseImageResolver
from sandgate.templates._spec import default_images_dir

pytestmark = pytest.mark.docker

UNREACHABLE_REGISTRY_IMAGE = "registry.invalid/debian:bookworm-slim"
UNREACHABLE_MIRROR = "http://127.0.0.1:9/debian"


class Events:
    def __init__(self) -> None:
        self.items: list[tuple[BuildStep, float | None, str]] = []

    def __call__(self, step: BuildStep, fraction: float | None, message: str) -> None:
        self.items.append((step, fraction, message))

    def steps(self) -> set[BuildStep]:
        return {step for step, _, _ in self.items}

    def build_steps(self) -> list[str]:
        return [m for s, _, m in self.items if s is BuildStep.BUILD and m.startswith("Step ")]


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    client = docker.from_env()
    yield client
    client.close()


@pytest.fixture
def namespace(client: Any) -> Iterator[str]:
    namespace = f"sandgate-test-{uuid.uuid4().hex[:10]}"
    yield namespace
    # Only this namespace's images: listing all of them costs seconds on an engine that holds
    # thousands (a developer's, after many runs).
    for image in client.images.list(filters={"reference": f"{namespace}/*"}):
        for tag in image.tags:
            if tag.startswith(f"{namespace}/"):
                client.images.remove(tag, force=True)


@pytest.fixture
def packages() -> list[str]:
    return package_list(default_images_dir() / "base" / "packages.txt")


def make_image(client: Any, ref: str, labels: dict[str, str] | None = None) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        payload = b"sandgate test image\n"
        info = tarfile.TarInfo("etc/sandgate-test")
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    repository, _, tag = ref.rpartition(":")
    changes = [f"LABEL {key}={value}" for key, value in (labels or {}).items()]
    client.api.import_image_from_data(
        buffer.getvalue(), repository=repository, tag=tag, changes=changes
    )
    return str(client.images.get(ref).id)


def resolver(client: Any, namespace: str, source: Source, events: Events) -> BaseImageResolver:
    return BaseImageResolver(
        DockerImages(client),
        source=source,
        mirror=UNREACHABLE_MIRROR,
        on_progress=events,
        registry_image=f"{namespace}/slim:test",
        rootfs_image=f"{namespace}/rootfs:test",
    )


def _rootfs_ref(namespace: str, packages: list[str]) -> str:
    """The tag of a debootstrap image for ``packages``: it carries their digest."""
    return f"{namespace}/rootfs:test-{rootfs_digest(SUITE, VARIANT, packages)[:12]}"


def test_debootstrap_source_reuses_a_rootfs_whose_label_matches(
    client: Any, namespace: str, packages: list[str]
) -> None:
    label = {ROOTFS_DIGEST_LABEL: rootfs_digest(SUITE, VARIANT, packages)}
    rootfs_id = make_image(client, _rootfs_ref(namespace, packages), label)
    events = Events()

    base = resolver(client, namespace, Source.DEBOOTSTRAP, events).acquire(packages)

    assert (base.ref, base.id, base.offline) == (_rootfs_ref(namespace, packages), rootfs_id, True)
    assert BuildStep.DEBOOTSTRAP not in events.steps()
    assert BuildStep.PULL not in events.steps()


def test_a_rootfs_built_for_other_packages_is_not_used(
    client: Any, namespace: str, packages: list[str]
) -> None:
    other = [*packages, "vim"]
    label = {ROOTFS_DIGEST_LABEL: rootfs_digest(SUITE, VARIANT, other)}
    make_image(client, _rootfs_ref(namespace, other), label)
    make_image(client, f"{namespace}/rootfs:test", label)  # an untagged-by-digest leftover

    assert resolver(client, namespace, Source.DEBOOTSTRAP, Events()).find_local(packages) is None
    assert resolver(client, namespace, Source.AUTO, Events()).find_local(packages) is None


def test_auto_prefers_a_local_registry_image_over_a_local_rootfs(
    client: Any, namespace: str, packages: list[str]
) -> None:
    label = {ROOTFS_DIGEST_LABEL: rootfs_digest(SUITE, VARIANT, packages)}
    make_image(client, _rootfs_ref(namespace, packages), label)
    slim_id = make_image(client, f"{namespace}/slim:test")
    events = Events()

    base = resolver(client, namespace, Source.AUTO, events).acquire(packages)

    assert (base.id, base.offline) == (slim_id, False)
    assert BuildStep.PULL not in events.steps()


def test_debootstrap_source_ignores_a_local_registry_image(
    client: Any, namespace: str, packages: list[str]
) -> None:
    make_image(client, f"{namespace}/slim:test")
    assert resolver(client, namespace, Source.DEBOOTSTRAP, Events()).find_local(packages) is None


def test_auto_without_local_images_tries_the_registry_then_debootstrap(
    client: Any, namespace: str, packages: list[str]
) -> None:
    if shutil.which("debootstrap") is None:
        pytest.fail("debootstrap must be installed for this test: apt-get install debootstrap")
    events = Events()
    auto = BaseImageResolver(
        DockerImages(client),
        source=Source.AUTO,
        mirror=UNREACHABLE_MIRROR,
        on_progress=events,
        registry_image=UNREACHABLE_REGISTRY_IMAGE,
        rootfs_image=f"{namespace}/rootfs:test",
    )

    with pytest.raises(TemplateBuildError, match="Debian mirror unreachable") as caught:
        auto.acquire(packages)

    assert "--mirror" in str(caught.value)
    assert BuildStep.PULL in events.steps()
    assert caught.value.code == "template_build_failed"


def test_registry_source_fails_clearly_when_the_registry_is_unreachable(
    client: Any, namespace: str, packages: list[str]
) -> None:
    registry = BaseImageResolver(
        DockerImages(client),
        source=Source.REGISTRY,
        mirror=UNREACHABLE_MIRROR,
        on_progress=Events(),
        registry_image=UNREACHABLE_REGISTRY_IMAGE,
    )
    with pytest.raises(TemplateBuildError, match=r"cannot pull registry\.invalid/") as caught:
        registry.acquire(packages)
    assert "--source debootstrap" in str(caught.value)


def test_missing_debootstrap_is_reported_with_the_fix(
    client: Any,
    namespace: str,
    packages: list[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    offline = resolver(client, namespace, Source.DEBOOTSTRAP, Events())
    with pytest.raises(TemplateBuildError, match="apt-get install debootstrap"):
        offline.acquire(packages)


def test_unknown_source_and_template_are_errors(client: Any) -> None:
    with pytest.raises(TemplateBuildError, match="unknown template source 'cloud'"):
        TemplateBuilder(client, source="cloud")
    with pytest.raises(TemplateBuildError, match=r"unknown template 'nope'.*base"):
        TemplateBuilder(client).build("nope")


@pytest.fixture
def images_dir(tmp_path: Path) -> Path:
    """A copy of images/ whose base Dockerfile only adds a label: fast and offline."""
    directory = Path(shutil.copytree(default_images_dir(), tmp_path / "images"))
    (directory / "base" / "Dockerfile").write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nLABEL sandgate.test=1\n"
    )
    return directory


@pytest.fixture
def builder_for(
    client: Any, namespace: str, images_dir: Path, packages: list[str]
) -> Iterator[Any]:
    label = {ROOTFS_DIGEST_LABEL: rootfs_digest(SUITE, VARIANT, packages)}
    make_image(client, _rootfs_ref(namespace, packages), label)

    def make(events: Events) -> TemplateBuilder:
        return TemplateBuilder(
            client,
            source=Source.DEBOOTSTRAP,
            mirror=UNREACHABLE_MIRROR,
            on_progress=events,
            images_dir=images_dir,
            rootfs_image=f"{namespace}/rootfs:test",
            image_namespace=namespace,
        )

    yield make


def test_second_build_reuses_the_image(builder_for: Any, namespace: str, client: Any) -> None:
    first_events, second_events = Events(), Events()
    builder = builder_for(first_events)
    assert builder.status("base") is None
    assert builder.state("base")[0] is TemplateState.MISSING

    first = builder.build("base")
    second = builder_for(second_events).build("base")

    assert first_events.build_steps(), "the first build ran the Dockerfile"
    assert second_events.build_steps() == []
    assert second == first
    assert builder.status("base") == first
    assert first.image_ref == f"{namespace}/template-base:{first.digest[:12]}"
    image = client.images.get(f"{namespace}/template-base:latest")
    assert image.id == first.image_id
    assert image.labels["sandgate.template"] == "base"
    assert image.labels["sandgate.template.digest"] == first.digest


def test_changing_the_dockerfile_makes_the_image_stale(builder_for: Any, images_dir: Path) -> None:
    builder = builder_for(Events())
    first = builder.build("base")
    dockerfile = images_dir / "base" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "LABEL sandgate.test.changed=1\n")

    assert builder.status("base") is None
    state, stale = builder.state("base")
    assert state is TemplateState.STALE
    assert stale is not None and stale.image_id == first.image_id

    rebuilt = builder.build("base")
    assert rebuilt.digest != first.digest
    assert builder.state("base") == (TemplateState.CURRENT, rebuilt)


def test_force_rebuilds_a_current_image_and_drops_the_old_one(
    builder_for: Any, client: Any
) -> None:
    first = builder_for(Events()).build("base")
    events = Events()
    forced = builder_for(events).build("base", force=True)
    assert events.build_steps()
    assert forced.image_id != first.image_id
    assert builder_for(Events()).status("base") == forced
    assert DockerImages(client).get(first.image_id) is None


def test_ensure_returns_each_template_once(builder_for: Any) -> None:
    builder = builder_for(Events())
    built = builder.ensure(["base", "base"])
    assert [b.name for b in built] == ["base"]
    assert builder.status("base") == built[0]


def test_a_failing_dockerfile_raises_with_its_output(builder_for: Any, images_dir: Path) -> None:
    (images_dir / "base" / "Dockerfile").write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN /bin/definitely-missing\n"
    )
    with pytest.raises(TemplateBuildError, match=r"docker build of .* failed"):
        builder_for(Events()).build("base")
