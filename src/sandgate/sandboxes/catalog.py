"""Which templates sandboxes can be created from: built images recorded in the store."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime
from typing import Protocol

from sandgate.store import Store, Template

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
