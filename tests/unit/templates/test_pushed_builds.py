"""Starting a v1 build (``BuildService.start_pushed``) where it cannot run: without a Docker
engine the start call says what is needed, and a build that was not requested through
``POST /templates`` is pointed to its own start route. Nothing moves the build."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sandgate.errors import InvalidRequest, RuntimeUnavailable
from sandgate.store import Store, TemplateRecords
from sandgate.templates._native_layers import NativeLayers
from sandgate.templates.builds import BuildRequest, BuildService, PushedStart


@pytest.fixture
def service(tmp_path: Path) -> Iterator[BuildService]:
    store = Store.open(f"sqlite:///{tmp_path / 'store.db'}")
    yield BuildService(
        TemplateRecords(store),
        home=tmp_path / "home",
        backends=lambda: NativeLayers(tmp_path / "rootfs"),
        envd_version="0.0.0",
    )
    store.close()


def test_a_pushed_build_without_a_docker_engine_says_what_is_needed(
    service: BuildService,
) -> None:
    template, build = service.request_build(
        "team", BuildRequest("pushed", (), 1, 512, PushedStart("echo hi", None))
    )
    with pytest.raises(RuntimeUnavailable, match="Docker engine") as caught:
        service.start_pushed("team", template.id, build.id)
    assert caught.value.status == 503
    assert service.build("team", template.id, build.id).state == "waiting"


def test_a_build_not_requested_for_a_push_is_sent_to_its_own_start(
    service: BuildService,
) -> None:
    template, build = service.request_build("team", BuildRequest("stepped", (), 1, 512))
    with pytest.raises(InvalidRequest, match=f"POST /v2/templates/{template.id}/builds"):
        service.start_pushed("team", template.id, build.id)
    rebuilt_template, rebuilt = service.rebuild(
        "team", template.id, BuildRequest("", (), 2, 1024, PushedStart())
    )
    assert rebuilt_template.id == template.id and rebuilt.id != build.id
    assert (rebuilt.cpu_count, rebuilt.memory_mb, rebuilt.state) == (2, 1024, "waiting")
