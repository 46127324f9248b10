"""The few Docker engine calls the template builder makes, through the docker SDK.

The SDK is untyped; ``Any`` stays inside this module. Docker errors are translated into
``TemplateBuildError`` with a message saying what to do.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from .errors import TemplateBuildError

__all__ = ["DockerImage", "DockerImages"]

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")


@dataclasses.dataclass(frozen=True, slots=True)
class DockerImage:
    id: str
    tags: tuple[str, ...]
    labels: Mapping[str, str]
    size_bytes: int


class DockerImages:
    """Image operations on one engine: inspect, pull, import, build, tag."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def check_engine(self) -> None:
        """Raises ``TemplateBuildError`` unless the engine answers a ping."""
        try:
            self._client.ping()
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise TemplateBuildError(
                f"Docker engine unreachable ({exc}): start dockerd or set DOCKER_HOST"
            ) from exc

    def get(self, ref: str) -> DockerImage | None:
        """The image named ``ref`` (tag or id), or ``None`` when it does not exist."""
        try:
            image = self._client.images.get(ref)
        except docker.errors.ImageNotFound:
            return None
        except docker.errors.APIError as exc:
            raise TemplateBuildError(f"cannot inspect image {ref}: {exc}") from exc
        attrs: dict[str, Any] = image.attrs
        config = attrs.get("Config") or {}
        return DockerImage(
            id=str(attrs["Id"]),
            tags=tuple(image.tags),
            labels=dict(config.get("Labels") or {}),
            size_bytes=int(attrs.get("Size") or 0),
        )

    def tag(self, image_id: str, ref: str) -> None:
        repository, _, tag = ref.rpartition(":")
        if not self._client.api.tag(image_id, repository, tag, force=True):
            raise TemplateBuildError(f"docker refused to tag {image_id} as {ref}")

    def remove_if_untagged(self, image_id: str) -> None:
        """Removes an image that lost all its tags, unless a container still uses it."""
        image = self.get(image_id)
        if image is None or image.tags:
            return
        try:
            self._client.images.remove(image_id)
        except docker.errors.APIError:
            return  # in use by a container (e.g. a running sandbox): keep it

    def pull(self, ref: str, *, stall_timeout: float, on_status: Callable[[str], None]) -> str:
        """Pulls ``ref``; returns its image id.

        Gives up when the engine sends nothing for ``stall_timeout`` seconds (the SDK's
        ``pull`` has no timeout at all, hence the direct call). Raises
        ``TemplateBuildError`` on any failure.
        """
        api = self._client.api
        repository, _, tag = ref.rpartition(":")
        try:
            response = api._post(
                api._url("/images/create"),
                params={"fromImage": repository, "tag": tag},
                stream=True,
                timeout=(stall_timeout, stall_timeout),
            )
            api._raise_for_status(response)
            for event in api._stream_helper(response, decode=True):
                if "error" in event:
                    raise TemplateBuildError(f"cannot pull {ref}: {event['error']}")
                status = " ".join(str(event.get(k, "")) for k in ("id", "status", "progress"))
                on_status(status.strip())
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise TemplateBuildError(f"cannot pull {ref}: {exc}") from exc
        image = self.get(ref)
        if image is None:
            raise TemplateBuildError(f"pulled {ref} but the engine does not list it")
        return image.id

    def import_rootfs(self, chunks: Iterator[bytes], ref: str, changes: list[str]) -> str:
        """Creates image ``ref`` from a tar stream (``docker import``); returns its id."""
        repository, _, tag = ref.rpartition(":")
        try:
            self._client.api.import_image_from_stream(
                chunks, repository=repository, tag=tag, changes=changes
            )
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise TemplateBuildError(f"docker import of {ref} failed: {exc}") from exc
        image = self.get(ref)
        if image is None:
            raise TemplateBuildError(f"docker import of {ref} produced no image")
        return image.id

    def build(
        self,
        context: Path,
        *,
        tag: str,
        build_args: Mapping[str, str],
        labels: Mapping[str, str],
        network_mode: str | None,
        nocache: bool,
        on_step: Callable[[int, int, str], None],
    ) -> str:
        """Runs ``docker build`` on ``context``; returns the image id.

        ``on_step(n, total, text)`` is called for every ``Step n/total`` line. Raises
        ``TemplateBuildError`` carrying the last lines of output when a step fails.
        """
        tail: list[str] = []
        image_id: str | None = None
        try:
            stream = self._client.api.build(
                path=str(context),
                tag=tag,
                buildargs=dict(build_args),
                labels=dict(labels),
                network_mode=network_mode,
                rm=True,
                forcerm=True,
                pull=False,
                nocache=nocache,
                decode=True,
            )
            for event in stream:
                if "error" in event:
                    output = "".join(tail[-15:])
                    raise TemplateBuildError(
                        f"docker build of {tag} failed: {event['error'].strip()}\n{output}"
                    )
                aux = event.get("aux")
                if isinstance(aux, dict) and "ID" in aux:
                    image_id = str(aux["ID"])
                text = event.get("stream")
                if not isinstance(text, str):
                    continue
                tail = [*tail[-40:], text]
                match = _STEP.match(text.strip())
                if match:
                    on_step(int(match[1]), int(match[2]), match[3])
        except (docker.errors.DockerException, requests.RequestException) as exc:
            raise TemplateBuildError(f"docker build of {tag} failed: {exc}") from exc
        image = self.get(image_id or tag)
        if image is None:
            raise TemplateBuildError(f"docker build of {tag} finished without an image")
        return image.id
