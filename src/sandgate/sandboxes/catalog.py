"""Which templates sandboxes can be created from: built images recorded in the store."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Protocol

from sandgate.store import Store, Template, TemplateRecords

#: The envd version reported to SDKs; they gate features on it (e2b-protocol.md §3.9).
ENVD_VERSION = "0.6.4"


class BuiltImage(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def image_ref(self) -> str: ...
    @property
    def image_id(self) -> str: ...
    @property
    def digest(self) -> str: ...


def resolve(store: Store, team_id: str, ref: str) -> Template | None:
    """The template ``ref`` names for ``team_id``: an id or alias of the team's own templates,
    a shipped template's name or id, a public template's id, each optionally with ``:tag``
    (the build that tag points at; no tag: the current build). None when there is no such
    template, it has no ready build, or it belongs to another team and is not public.

    A tagged reference to an older build comes back as a detached ``Template`` carrying that
    build's image and settings (never added to a session)."""
    records = TemplateRecords(store)
    name, _, tag = ref.partition(":")
    template = records.find(team_id, name)
    if template is None:
        other = records.get(name)
        template = other if other is not None and other.public else None
    if template is None or not template.image_ref:
        return None
    if not tag or (template.team_id is None and tag in ("default", "latest")):
        return template
    assignment = records.tag(template.id, tag)
    if assignment is None:
        return None
    if assignment.build_id == template.build_id:
        return template
    build = records.build(assignment.build_id)
    if build is None or build.state != "ready" or not build.image_ref:
        return None
    return Template(
        id=template.id,
        name=template.name,
        alias=template.alias,
        team_id=template.team_id,
        image_ref=build.image_ref,
        image_id=build.image_id or "",
        digest=build.image_id or "",
        envd_version=template.envd_version,
        cpu_count=build.cpu_count,
        memory_mb=build.memory_mb,
        start_cmd=build.start_cmd,
        ready_port=None,
        ready_cmd=build.ready_cmd,
        default_user=build.default_user,
        default_workdir=build.default_workdir,
        envs=build.envs,
        build_id=build.id,
        public=template.public,
        created_at=template.created_at,
        updated_at=template.updated_at,
    )


def template_id(name: str) -> str:
    """A stable, E2B-shaped id for a template name ([a-z0-9], 20 characters)."""
    return hashlib.sha256(name.encode()).hexdigest()[:20]


#: Image labels a template uses to declare its start command and readiness port.
START_CMD_LABEL = "sandgate.template.start_cmd"
READY_PORT_LABEL = "sandgate.template.ready_port"


def register(
    store: Store,
    built: BuiltImage,
    *,
    labels: dict[str, str] | None = None,
    cpu_count: int = 1,
    memory_mb: int = 512,
) -> None:
    """Records a built template; ``labels`` are its image's labels (start command, port)."""
    labels = labels or {}
    ready_port = labels.get(READY_PORT_LABEL)
    now = datetime.now(UTC)
    store.upsert_template(
        Template(
            id=template_id(built.name),
            name=built.name,
            image_ref=built.image_ref,
            image_id=built.image_id,
            digest=built.digest,
            envd_version=ENVD_VERSION,
            cpu_count=cpu_count,
            memory_mb=memory_mb,
            start_cmd=labels.get(START_CMD_LABEL) or None,
            ready_port=_port(ready_port),
            public=True,
            created_at=now,
            updated_at=now,
        )
    )


def _port(label: str | None) -> int | None:
    """A readiness-port label as a port; anything but a canonical 1..65535 means none."""
    if not label or not re.fullmatch(r"[1-9][0-9]{0,4}", label) or int(label) > 65535:
        return None
    return int(label)
