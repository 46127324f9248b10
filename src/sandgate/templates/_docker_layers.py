"""Template layers on a Docker engine: one image layer per step, cached by step key.

A step runs in a container created from its parent layer's image (``/bin/sh -c``, as the
step's user, on the engine's default network so package installs work, within
``BUILD_MEMORY``/``BUILD_PIDS``); a ``COPY`` payload is put into the container before it
starts. The container is committed as ``sandgate/template-layer:<key>`` and removed, so a
later build with the same prefix of steps finds each layer by its tag. The template's image
is one last commit that sets its environment and labels (user ``root``, workdir ``/``: the
guest is every sandbox's first process; the template's user and workdir are the guest's
defaults, kept by the catalog).

Trust: build steps are the team's code. They run in Docker's default build isolation (root
of the container, the engine's default seccomp profile and capabilities, the default bridge
network), not behind the sandbox wall; docs/threat-model.md says so. Nothing of the host is
mounted into a build container.
"""

from __future__ import annotations

import contextlib
import io
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from ._docker import DockerImages
from ._layers import LAYER_KEY_LABEL, TAIL_LINES, BuildLog, FinalConfig, StepFailed
from ._plan import BASE_STEP, FINALIZE_STEP, Action
from .errors import TemplateBuildError

__all__ = ["DockerLayers"]

LAYER_REPOSITORY = "sandgate/template-layer"
#: Names the server (its instance id) whose build a container is running.
OWNER_LABEL = "sandgate.build.owner"
BUILD_MEMORY = 4 * 1024**3
BUILD_PIDS = 4096
#: Seconds without a byte from the engine after which a pull is given up.
PULL_STALL_S = 30.0
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class DockerLayers:
    engine = "docker"

    def __init__(self, client: Any, owner: str = "") -> None:
        self._client = client
        self._images = DockerImages(client)
        self._owner = owner

    def remove_stale(self) -> int:
        """Removes build containers this owner left behind (a crash mid-step); returns how
        many. Other servers' build containers on the same engine are left alone."""
        api = self._client.api
        found = api.containers(all=True, filters={"label": f"{OWNER_LABEL}={self._owner}"})
        for container in found:
            with contextlib.suppress(docker.errors.DockerException, requests.RequestException):
                api.remove_container(container["Id"], force=True)
        return len(found)

    def start(self, image: str | None, tree_ref: str | None, log: BuildLog) -> tuple[str, str]:
        ref = image or tree_ref
        if ref is None:
            raise StepFailed(BASE_STEP, "no starting image")
        found = self._images.get(ref)
        if found is None and image is not None:
            log("info", BASE_STEP, f"{image} is not in the engine; pulling it")
            try:
                self._images.pull(
                    _with_tag(image),
                    stall_timeout=PULL_STALL_S,
                    on_status=lambda status: log("debug", BASE_STEP, status),
                )
            except TemplateBuildError as exc:
                raise StepFailed(
                    BASE_STEP,
                    f"image {image} is not in the server's Docker engine and could not be "
                    f"pulled ({exc}). Load it into the engine (`docker load`, `docker build`) "
                    "or make its registry reachable, then build again",
                ) from None
            found = self._images.get(_with_tag(image))
        if found is None:
            raise StepFailed(BASE_STEP, f"image {ref} is not in the server's Docker engine")
        return found.id, found.id

    def cached(self, key: str) -> str | None:
        image = self._images.get(f"{LAYER_REPOSITORY}:{key}")
        if image is None or image.labels.get(LAYER_KEY_LABEL) != key:
            return None
        return image.id

    def run(
        self,
        parent: str,
        key: str,
        action: Action,
        script: str,
        staging: Path | None,
        log: Callable[[str], None],
    ) -> str:
        api = self._client.api
        env = [f"{k}={v}" for k, v in action.env]
        if not any(item.startswith("PATH=") for item in env):
            env.append(f"PATH={_PATH}")
        try:
            container = api.create_container(
                parent,
                entrypoint=["/bin/sh", "-c"],
                command=[script],
                user=action.user,
                working_dir="/",
                environment=env,
                labels={LAYER_KEY_LABEL: key, OWNER_LABEL: self._owner},
                host_config=api.create_host_config(
                    mem_limit=BUILD_MEMORY,
                    memswap_limit=BUILD_MEMORY,
                    pids_limit=BUILD_PIDS,
                    init=False,
                ),
            )
        except docker.errors.APIError as exc:
            raise StepFailed(action.step, f"cannot start the step: {exc.explanation}") from None
        cid = container["Id"]
        try:
            if staging is not None:
                api.put_archive(cid, "/", _tar_of(staging, ".sandgate-copy"))
            api.start(cid)
            tail: list[str] = []
            pending = b""
            for chunk in api.logs(cid, stream=True, follow=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    line = raw.decode(errors="replace").rstrip()
                    tail = [*tail[-(TAIL_LINES - 1) :], line]
                    log(line[:2000])
            if pending:
                line = pending.decode(errors="replace").rstrip()
                tail = [*tail[-(TAIL_LINES - 1) :], line]
                log(line[:2000])
            status = int(api.wait(cid).get("StatusCode", -1))
            if status != 0:
                output = "\n".join(tail)
                raise StepFailed(
                    action.step,
                    f"step {action.step} failed (exit {status}); last output:\n{output}",
                )
            committed = api.commit(
                cid, repository=LAYER_REPOSITORY, tag=key, conf={"Labels": {LAYER_KEY_LABEL: key}}
            )
            return str(committed["Id"])
        except (docker.errors.APIError, requests.RequestException) as exc:
            raise StepFailed(action.step, f"the Docker engine failed the step: {exc}") from None
        finally:
            with contextlib.suppress(docker.errors.DockerException, requests.RequestException):
                api.remove_container(cid, force=True)

    def load(self, archive: Iterator[bytes], tag: str, log: BuildLog) -> None:
        try:
            for event in self._client.api.load_image(archive):
                if not isinstance(event, dict):
                    continue
                if event.get("error"):
                    raise StepFailed(
                        BASE_STEP, f"the engine refused the pushed image: {event['error']}"
                    )
                if event.get("stream"):
                    log("debug", BASE_STEP, str(event["stream"]).strip())
        except (docker.errors.APIError, requests.RequestException) as exc:
            raise StepFailed(BASE_STEP, f"cannot load the pushed image: {exc}") from None
        if self._images.get(tag) is None:
            raise StepFailed(BASE_STEP, f"the engine does not list the loaded image {tag}")

    def finalize(
        self, top: str, repository: str, key: str, config: FinalConfig, labels: dict[str, str]
    ) -> tuple[str, str]:
        api = self._client.api
        tag = key[:12]
        check = self._run_check(top)
        if check != 0:
            raise StepFailed(
                FINALIZE_STEP,
                "the template has no python3, which Sandgate's in-sandbox agent needs: add "
                "it (e.g. .apt_install('python3')) or start from an image that has it",
            )
        env = dict(config.envs)
        env.setdefault("PATH", _PATH)
        try:
            container = api.create_container(top, command=["true"], entrypoint=[""])
            try:
                api.commit(
                    container["Id"],
                    repository=repository,
                    tag=tag,
                    conf={
                        "Env": [f"{k}={v}" for k, v in env.items()],
                        "User": "0:0",
                        "WorkingDir": "/",
                        "Entrypoint": None,
                        "Cmd": ["/bin/sh"],
                        "Labels": {**labels, LAYER_KEY_LABEL: key},
                    },
                )
            finally:
                api.remove_container(container["Id"], force=True)
        except (docker.errors.APIError, requests.RequestException) as exc:
            raise StepFailed(FINALIZE_STEP, f"cannot make the template image: {exc}") from None
        image = self._images.get(f"{repository}:{tag}")
        if image is None:
            raise StepFailed(FINALIZE_STEP, f"the engine does not list {repository}:{tag}")
        return f"{repository}:{tag}", image.id

    def _run_check(self, image: str) -> int:
        api = self._client.api
        container = api.create_container(
            image,
            entrypoint=["/bin/sh", "-c"],
            command=["command -v python3 >/dev/null"],
            user="0:0",
            network_disabled=True,
        )
        try:
            api.start(container["Id"])
            return int(api.wait(container["Id"]).get("StatusCode", -1))
        finally:
            with contextlib.suppress(docker.errors.DockerException):
                api.remove_container(container["Id"], force=True)


def _with_tag(image: str) -> str:
    name = image.rsplit("/", 1)[-1]
    return image if ":" in name or "@" in image else f"{image}:latest"


def _tar_of(directory: Path, arcname: str) -> bytes:
    """``directory`` as a tar under ``arcname``, every entry owned by root (the step's
    script gives the payload its owner)."""
    buffer = io.BytesIO()

    def as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(directory, arcname=arcname, filter=as_root)
    return buffer.getvalue()
