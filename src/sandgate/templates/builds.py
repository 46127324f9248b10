"""Team templates and their builds: the service behind E2B's template API.

A build is a state machine (``BuildState``, one transition table): ``POST /v3/templates`` makes
it ``waiting`` (files may be uploaded now), the start call moves it to ``building`` and queues a
background job, which ends ``ready`` (the template now starts from its image; its tags point at
it) or ``error`` (with the failed step and its output tail in ``reason``). Everything, the log
included, is in the store, so status polling survives a gateway restart; a build the restart
interrupted is marked ``error`` with that reason by ``recover``, never left ``building``.

Templates are per team: a team sees and builds its own, plus the shipped ones (``base``,
``code-interpreter-v1``), which stay built in. A template of another team is reported exactly
like one that does not exist (except by ``alias_exists``, which answers 403 "exists, not
yours" as E2B's does).
"""

from __future__ import annotations

import asyncio
import enum
import hashlib
import hmac
import re
import secrets
import string
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from sandgate._signed import signature_expired
from sandgate._tasks import cancel_and_wait, wait_quietly
from sandgate.errors import (
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RuntimeUnavailable,
    TemplateNotFound,
)
from sandgate.secrets.keyfile import install_key
from sandgate.store import Template, TemplateBuild, TemplateRecords

from ._context import ContextStore, UploadRejected
from ._layers import E2B_BASE_IMAGES, BuildLog, BuiltImage, LayerBackend, StepFailed, build_image
from ._plan import BASE_STEP, FINALIZE_STEP, BuildPlan, parse_plan
from ._pushed import PushStore
from .errors import TemplateBuildError

__all__ = ["BuildService", "BuildState", "PushedStart", "check_build_transition"]

log = structlog.get_logger("sandgate.templates")

_ID_ALPHABET = string.ascii_lowercase + string.digits
#: E2B's alias rule: lowercase letters, digits, ``-`` and ``_`` (and ``.`` inside).
_ALIAS = re.compile(r"[a-z0-9](?:[a-z0-9._-]{0,126}[a-z0-9])?")
_TAG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_HASH = re.compile(r"[0-9a-f]{64}")
DEFAULT_TAG = "default"
#: Where a pushed image is loaded in the engine: ``sandgate/pushed-<templateID>:<buildID>``.
PUSHED_REPOSITORY = "sandgate/pushed"
#: How long a signed upload URL stays valid.
UPLOAD_URL_TTL_S = 3600
#: Log lines buffered before a write to the store (and the longest a line waits).
_FLUSH_LINES = 50
_FLUSH_S = 0.25


class BuildState(enum.StrEnum):
    #: Requested (``POST /v3/templates``); waiting for its files and the start call.
    WAITING = "waiting"
    #: Started: queued behind other builds (``templates.max_concurrent_builds``) or running.
    BUILDING = "building"
    #: Built; the template starts from this build's image. Terminal.
    READY = "ready"
    #: Failed (``reason`` says where and why) or interrupted by a restart. Terminal.
    ERROR = "error"


_ALLOWED = {
    BuildState.WAITING: {BuildState.BUILDING, BuildState.ERROR},
    BuildState.BUILDING: {BuildState.READY, BuildState.ERROR},
    BuildState.READY: set(),
    BuildState.ERROR: set(),
}


def check_build_transition(build_id: str, current: BuildState, target: BuildState) -> None:
    """Raises ``Conflict`` naming the current state when the move is not allowed."""
    if target not in _ALLOWED[current]:
        raise Conflict(f"cannot move build {build_id} to {target.value}: it is {current.value}")


@dataclass(frozen=True)
class BuildRequest:
    """``POST /v3/templates`` (and ``/v2/templates``, ``/templates``): ``name`` may carry a
    tag (``name:tag``). ``pushed`` holds a v1 build's start and ready commands: that build
    starts from an image pushed to the template's repository (``start_pushed``)."""

    name: str
    tags: tuple[str, ...]
    cpu_count: int
    memory_mb: int
    pushed: PushedStart | None = None


@dataclass(frozen=True)
class PushedStart:
    """What E2B's v1 build request (``TemplateBuildRequest``) says the pushed image's
    template runs: kept on the build (``spec``) until the push is built."""

    start_cmd: str | None = None
    ready_cmd: str | None = None

    def spec(self) -> dict[str, Any]:
        return {"v1": {"startCmd": self.start_cmd, "readyCmd": self.ready_cmd}}


BackendFactory = Callable[[], LayerBackend]


class BuildService:
    """Owns team templates, builds, uploads and tags. ``backends`` makes the layer backend
    a build runs on (Docker when its engine answers, else engine-less); ``registered`` is
    called with a new image before its build is reported ready (to prepare its tree)."""

    def __init__(
        self,
        records: TemplateRecords,
        *,
        home: Path,
        backends: BackendFactory,
        envd_version: str,
        max_concurrent: int = 2,
        max_context_bytes: int = 1024**3,
        enabled: bool = True,
        registered: Callable[[str], None] | None = None,
        cleanup: Callable[[], None] | None = None,
        max_push_bytes: int = 10 * 1024**3,
    ) -> None:
        self._records = records
        self._files = ContextStore(home / "templates" / "files")
        self._pushes = PushStore(home / "templates" / "registry", max_push_bytes)
        self._key = _upload_key(home / "templates" / "upload.key")
        self._backends = backends
        self._envd_version = envd_version
        self._slots = asyncio.Semaphore(max_concurrent)
        self._max_context = max_context_bytes
        self._enabled = enabled
        self._registered = registered
        self._cleanup = cleanup
        self._jobs: dict[str, asyncio.Task[None]] = {}

    @property
    def files(self) -> ContextStore:
        return self._files

    @property
    def pushes(self) -> PushStore:
        """Images pushed for v1 builds (``docker push``, served by ``api/e2b/registry``)."""
        return self._pushes

    # -- lifecycle ------------------------------------------------------------------------

    def recover(self) -> None:
        """Marks builds a restart interrupted as failed (their jobs died with the process);
        a build still ``waiting`` for its start call keeps waiting."""
        now = datetime.now(UTC)
        interrupted = self._records.builds_in([BuildState.BUILDING.value])
        if interrupted and self._cleanup is not None:
            try:
                self._cleanup()
            except Exception as exc:  # the states below matter more than the leftovers
                log.warning("template.cleanup_failed", error=repr(exc))
        for build in interrupted:
            reason = (
                "the Sandgate server restarted while this build ran; start the build again "
                "(layers it finished are reused)"
            )
            self._records.update_build(
                build.id,
                state=BuildState.ERROR.value,
                reason=reason,
                reason_step=None,
                finished_at=now,
                updated_at=now,
            )
            self._records.append_logs(build.id, [(now, "error", None, reason)])
            log.warning("template.build_interrupted", build=build.id, template=build.template_id)

    async def stop(self) -> None:
        """Cancels running build jobs (they end ``error`` at the next start's ``recover``)."""
        for task in list(self._jobs.values()):
            task.cancel()
        for task in list(self._jobs.values()):
            await cancel_and_wait(task)
        self._jobs.clear()

    # -- templates ------------------------------------------------------------------------

    def request_build(self, team_id: str, request: BuildRequest) -> tuple[Template, TemplateBuild]:
        """Creates the template (or reuses the team's template of that name) and a
        ``waiting`` build of it. Raises ``InvalidRequest``, ``Conflict``, ``Forbidden``."""
        if not self._enabled:
            raise Forbidden(
                "template builds are turned off on this server (templates.team_builds); "
                "ask the operator"
            )
        alias, tags = _split_name(request.name, request.tags)
        shipped = self._records.find(None, alias)
        if shipped is not None:
            raise Conflict(f"'{alias}' is a template built into this server; choose another name")
        now = datetime.now(UTC)
        template = self._records.find(team_id, alias)
        if template is None or template.team_id != team_id:
            template = Template(
                id=_new_id(),
                name=f"{team_id}/{alias}",
                alias=alias,
                team_id=team_id,
                image_ref="",
                image_id="",
                digest="",
                envd_version=self._envd_version,
                cpu_count=request.cpu_count,
                memory_mb=request.memory_mb,
                public=False,
                created_at=now,
                updated_at=now,
                spawn_count=0,
            )
            self._records.add(template)
        return template, self._add_build(template, request, tags)

    def rebuild(
        self, team_id: str, ref: str, request: BuildRequest
    ) -> tuple[Template, TemplateBuild]:
        """A new ``waiting`` build of the team's template ``ref`` (E2B's v1
        ``POST /templates/{templateID}``); ``request.name`` is not used."""
        if not self._enabled:
            raise Forbidden(
                "template builds are turned off on this server (templates.team_builds); "
                "ask the operator"
            )
        template = self.own_template(team_id, ref)
        return template, self._add_build(template, request, [DEFAULT_TAG])

    def _add_build(
        self, template: Template, request: BuildRequest, tags: Sequence[str]
    ) -> TemplateBuild:
        now = datetime.now(UTC)
        build = TemplateBuild(
            id=str(uuid.uuid4()),
            template_id=template.id,
            team_id=template.team_id,
            state=BuildState.WAITING.value,
            cpu_count=request.cpu_count,
            memory_mb=request.memory_mb,
            tags=list(tags),
            spec=request.pushed.spec() if request.pushed is not None else None,
            created_at=now,
            updated_at=now,
            cached_steps=0,
            total_steps=0,
        )
        self._records.add_build(build)
        log.info(
            "template.build_requested",
            template=template.id,
            build=build.id,
            team=template.team_id,
        )
        return build

    def template(self, team_id: str, ref: str) -> Template:
        """A template the team may see (its own or shipped), by id or alias; ``name:tag``
        names the template. Raises ``TemplateNotFound``."""
        name = ref.split(":", 1)[0] if ":" in ref else ref
        found = self._records.find(team_id, name)
        if found is None:
            raise TemplateNotFound(f"template '{ref}' not found")
        return found

    def own_template(self, team_id: str, ref: str) -> Template:
        """A template of the team's own (shipped ones cannot be changed); else not found."""
        found = self.template(team_id, ref)
        if found.team_id != team_id:
            raise Forbidden(f"template '{found.display_name}' is built in and cannot be changed")
        return found

    def alias_status(self, team_id: str, alias: str) -> Template | None:
        """The team's (or a shipped) template of that alias; raises ``Forbidden`` when
        another team has one (E2B: "exists, but not yours")."""
        found = self._records.find(team_id, alias)
        if found is not None:
            return found
        if self._records.find_any_team(alias) is not None:
            raise Forbidden(f"template '{alias}' belongs to another team")
        return None

    def visible(self, team_id: str) -> Sequence[Template]:
        return self._records.visible(team_id)

    def builds(self, template: Template) -> Sequence[TemplateBuild]:
        return self._records.builds(template.id)

    def build_count(self, template: Template) -> int:
        return self._records.count_builds(template.id)

    async def delete(self, team_id: str, ref: str) -> None:
        """Deletes a team template with its builds, logs, tags and uploaded files; running
        sandboxes keep their root file system. Cancels a running build of it first."""
        template = self.own_template(team_id, ref)
        for build in self._records.builds(template.id):
            task = self._jobs.get(build.id)
            if task is not None:
                await cancel_and_wait(task)
        self._records.delete(template.id)
        self._files.forget(template.id)
        self._pushes.forget(template.id)
        log.info("template.deleted", template=template.id, team=team_id)

    def set_public(self, team_id: str, ref: str, public: bool) -> Template:
        template = self.own_template(team_id, ref)
        updated = self._records.update(template.id, public=public, updated_at=datetime.now(UTC))
        if updated is None:
            raise TemplateNotFound(f"template '{ref}' not found")
        return updated

    # -- uploads --------------------------------------------------------------------------

    def upload_link(self, team_id: str, template_id: str, files_hash: str) -> tuple[bool, str]:
        """Whether the files are present, and the signed path to PUT them to."""
        template = self.own_template(team_id, template_id)
        if not _HASH.fullmatch(files_hash):
            raise InvalidRequest("the files hash must be 64 lowercase hex digits")
        expires = int(time.time()) + UPLOAD_URL_TTL_S
        signature = self._sign(template.id, files_hash, expires)
        path = (
            f"/templates/{template.id}/files/{files_hash}/upload"
            f"?expires={expires}&signature={signature}"
        )
        return self._files.present(template.id, files_hash), path

    async def receive_upload(
        self,
        template_id: str,
        files_hash: str,
        expires: str,
        signature: str,
        chunks: AsyncIterator[bytes],
    ) -> int:
        """Stores an upload made to a signed URL; raises ``Forbidden`` for a bad or expired
        signature, ``InvalidRequest``/``PayloadTooLarge`` for a refused archive."""
        if not (expires.isdigit() and _HASH.fullmatch(files_hash)):
            raise Forbidden("invalid upload URL: ask for a new one")
        expected = self._sign(template_id, files_hash, int(expires))
        if not hmac.compare_digest(expected, signature) or signature_expired(
            int(expires), time.time()
        ):
            raise Forbidden("the upload URL is invalid or expired: ask for a new one")
        if self._records.get(template_id) is None:
            raise TemplateNotFound(f"template '{template_id}' not found")
        try:
            return await self._files.receive(template_id, files_hash, chunks, self._max_context)
        except UploadRejected as exc:
            if "larger than" in str(exc):
                raise PayloadTooLarge(str(exc)) from None
            raise InvalidRequest(str(exc)) from None

    def _sign(self, template_id: str, files_hash: str, expires: int) -> str:
        message = f"{template_id}/{files_hash}/{expires}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    # -- builds ---------------------------------------------------------------------------

    def build(self, team_id: str, template_id: str, build_id: str) -> TemplateBuild:
        template = self.template(team_id, template_id)
        build = self._records.build(build_id)
        if build is None or build.template_id != template.id:
            raise NotFound(f"build {build_id} of template '{template_id}' not found")
        return build

    def start(self, team_id: str, template_id: str, build_id: str, body: dict[str, Any]) -> None:
        """Checks the build request and queues the job. Raises ``InvalidRequest`` (the
        plan), ``TemplateNotFound`` (``fromTemplate``), ``Conflict`` (already started)."""
        template = self.own_template(team_id, template_id)
        build = self.build(team_id, template.id, build_id)
        plan = parse_plan(body)
        if plan.from_image in E2B_BASE_IMAGES:
            plan = _from_template(plan, "base")
        base_image = None
        if plan.from_template is not None:
            base = self.template(team_id, plan.from_template)
            if not base.image_ref:
                raise InvalidRequest(
                    f"template '{plan.from_template}' has no ready build to start from"
                )
            base_image = base.image_ref
        check_build_transition(build.id, BuildState(build.state), BuildState.BUILDING)
        self._queue(template, build, body, len(plan.steps), plan, base_image, None)

    def start_pushed(self, team_id: str, template_id: str, build_id: str) -> None:
        """Starts a v1 build (``POST /templates/{templateID}/builds/{buildID}``): its image
        is the one pushed as ``e2b/custom-envs/<templateID>:<buildID>``, loaded into the
        Docker engine by the job. A missing push fails the build with a status reason naming
        the image to push. Raises ``InvalidRequest`` (not a v1 build), ``Conflict`` (already
        started), ``RuntimeUnavailable`` (no Docker engine to load the image into)."""
        template = self.own_template(team_id, template_id)
        build = self.build(team_id, template.id, build_id)
        v1 = (build.spec or {}).get("v1")
        if not isinstance(v1, dict):
            raise InvalidRequest(
                f"build {build.id} was not requested through POST /templates: start it with "
                f"POST /v2/templates/{template.id}/builds/{build.id} and its steps"
            )
        check_build_transition(build.id, BuildState(build.state), BuildState.BUILDING)
        if self._backends().engine != "docker":
            raise RuntimeUnavailable(
                "a pushed image (E2B's v1 template build) is loaded into a Docker engine, and "
                "this server reaches none: start dockerd (or set runtime.docker.base_url), or "
                "build with the v2 template API (Template().from_dockerfile(...) in the SDKs)"
            )
        pushed = PushedStart(v1.get("startCmd"), v1.get("readyCmd"))
        self._queue(template, build, build.spec or {}, 0, None, None, pushed)

    def _queue(
        self,
        template: Template,
        build: TemplateBuild,
        spec: dict[str, Any],
        total_steps: int,
        plan: BuildPlan | None,
        base_image: str | None,
        pushed: PushedStart | None,
    ) -> None:
        now = datetime.now(UTC)
        self._records.update_build(
            build.id,
            state=BuildState.BUILDING.value,
            spec=spec,
            total_steps=total_steps,
            updated_at=now,
        )
        self._records.append_logs(
            build.id, [(now, "info", None, f"Build {build.id} of {template.display_name} queued")]
        )
        task = asyncio.create_task(
            self._run(template, build.id, plan, base_image, pushed),
            name=f"template-build-{build.id}",
        )
        self._jobs[build.id] = task
        task.add_done_callback(lambda _: self._jobs.pop(build.id, None))

    async def wait(self, build_id: str) -> None:
        """Waits for a running build job (tests, the CLI); returns at once when none runs."""
        task = self._jobs.get(build_id)
        if task is not None:
            await wait_quietly(task)

    def build_row(self, build_id: str) -> TemplateBuild | None:
        """A build by id, unchecked (for details of a build the caller already reached)."""
        return self._records.build(build_id)

    def logs(self, build_id: str, offset: int, limit: int) -> Sequence[Any]:
        return self._records.logs(build_id, offset, limit)

    async def _run(
        self,
        template: Template,
        build_id: str,
        plan: BuildPlan | None,
        base_image: str | None,
        pushed: PushedStart | None,
    ) -> None:
        sink = _LogSink(self._records, build_id)
        try:
            async with self._slots:
                backend = await asyncio.to_thread(self._backends)
                self._records.update_build(build_id, engine=backend.engine)
                if pushed is not None:
                    plan = await asyncio.to_thread(
                        self._load_pushed, backend, template.id, build_id, pushed, sink
                    )
                if plan is None:
                    raise TemplateBuildError("the build has no plan")
                built = await asyncio.to_thread(
                    build_image,
                    backend,
                    plan,
                    team_id=template.team_id or "",
                    template_id=template.id,
                    template_image=base_image,
                    files=self._files,
                    log=sink,
                )
                if self._registered is not None:
                    sink("info", FINALIZE_STEP, "[finalize] preparing the root file system")
                    await asyncio.to_thread(self._prepare, template.id, built.image_ref)
                sink.flush()
                self._ready(template, build_id, built)
        except StepFailed as exc:
            sink.flush()
            self._fail(build_id, str(exc), exc.step)
        except TemplateBuildError as exc:
            sink.flush()
            self._fail(build_id, str(exc), None)
        except asyncio.CancelledError:
            sink.flush()
            self._fail(
                build_id, "the build was cancelled (template deleted or server stopped)", None
            )
            raise
        except Exception as exc:  # a job must end in a state, whatever broke
            sink.flush()
            log.exception("template.build_crashed", build=build_id)
            self._fail(build_id, f"the build failed unexpectedly: {exc!r}", FINALIZE_STEP)

    def _load_pushed(
        self,
        backend: LayerBackend,
        template_id: str,
        build_id: str,
        pushed: PushedStart,
        sink: BuildLog,
    ) -> BuildPlan:
        """Loads the image pushed for the build into the engine and returns the plan that
        builds the template from it: the image's environment, then E2B's provisioning."""
        ref = f"e2b/custom-envs/{template_id}:{build_id}"
        if self._pushes.manifest(template_id, build_id) is None:
            raise StepFailed(
                BASE_STEP,
                f"no image was pushed for this build: push {ref} first (`docker push "
                f"<this server's registry host>/{ref}`), then start the build again with "
                "a new build id (POST /templates/{templateID})",
            )
        tag = f"{PUSHED_REPOSITORY}-{template_id}:{build_id}"
        sink("info", BASE_STEP, f"[base] loading the pushed image {ref}")
        backend.load(self._pushes.archive(template_id, build_id, tag), tag, sink)
        envs = self._pushes.image_env(template_id, build_id)
        steps = [{"type": "ENV", "args": [item for pair in envs for item in pair]}] if envs else []
        try:
            return parse_plan(
                {
                    "fromImage": tag,
                    "steps": steps,
                    "startCmd": pushed.start_cmd,
                    "readyCmd": pushed.ready_cmd,
                }
            )
        except InvalidRequest as exc:
            raise StepFailed(BASE_STEP, str(exc)) from None

    def _ready(self, template: Template, build_id: str, built: BuiltImage) -> None:
        now = datetime.now(UTC)
        config = built.config
        build = self._records.update_build(
            build_id,
            state=BuildState.READY.value,
            image_ref=built.image_ref,
            image_id=built.image_id,
            start_cmd=config.start_cmd,
            ready_cmd=config.ready_cmd,
            default_user=config.user,
            default_workdir=config.workdir,
            envs=config.envs,
            cached_steps=built.cached_steps,
            finished_at=now,
            updated_at=now,
        )
        if build is None:
            return  # the template was deleted meanwhile
        self._records.update(
            template.id,
            image_ref=built.image_ref,
            image_id=built.image_id,
            digest=built.image_id,
            start_cmd=config.start_cmd,
            ready_cmd=config.ready_cmd,
            ready_port=None,
            default_user=config.user,
            default_workdir=config.workdir,
            envs=config.envs,
            build_id=build_id,
            cpu_count=build.cpu_count,
            memory_mb=build.memory_mb,
            updated_at=now,
        )
        tags = list(dict.fromkeys([DEFAULT_TAG, *build.tags]))
        self._records.assign_tags(
            template.id, build_id, tags, [str(uuid.uuid4()) for _ in tags], now
        )
        self._records.append_logs(
            build_id, [(now, "info", FINALIZE_STEP, f"Template {template.display_name} is ready")]
        )
        log.info("template.built", template=template.id, build=build_id, image=built.image_ref)

    def _prepare(self, template_id: str, image_ref: str) -> None:
        """Gets the image's tree ready before the build is reported ready, so the first
        sandbox does not wait for it; a failure only delays that to the first create."""
        if self._registered is None:
            return
        try:
            self._registered(image_ref)
        except Exception as exc:  # preparing the tree early is an optimisation
            log.warning("template.prepare_failed", template=template_id, error=repr(exc))

    def _fail(self, build_id: str, reason: str, step: str | None) -> None:
        now = datetime.now(UTC)
        self._records.update_build(
            build_id,
            state=BuildState.ERROR.value,
            reason=reason,
            reason_step=step,
            finished_at=now,
            updated_at=now,
        )
        self._records.append_logs(build_id, [(now, "error", step, reason)])
        log.warning("template.build_failed", build=build_id, step=step, reason=reason[:300])

    # -- tags -----------------------------------------------------------------------------

    def assign_tags(self, team_id: str, target: str, tags: Sequence[str]) -> tuple[str, list[str]]:
        """Points ``tags`` at the build ``target`` (``name:tag``, tag ``default`` if none)
        names; returns the build id and the tags."""
        name, _, source_tag = target.partition(":")
        template = self.own_template(team_id, name)
        checked = [_check_tag(tag) for tag in tags]
        if not checked:
            raise InvalidRequest("give at least one tag")
        assignment = self._records.tag(template.id, source_tag or DEFAULT_TAG)
        if assignment is None:
            raise NotFound(f"template '{name}' has no tag '{source_tag or DEFAULT_TAG}'")
        self._records.assign_tags(
            template.id,
            assignment.build_id,
            checked,
            [str(uuid.uuid4()) for _ in checked],
            datetime.now(UTC),
        )
        return assignment.build_id, checked

    def remove_tags(self, team_id: str, name: str, tags: Sequence[str]) -> None:
        template = self.own_template(team_id, name.split(":", 1)[0])
        if not tags:
            raise InvalidRequest("give at least one tag")
        removed = self._records.remove_tags(template.id, list(tags), datetime.now(UTC))
        if removed == 0:
            raise NotFound(f"template '{name}' has none of the tags {', '.join(tags)}")

    def tags(self, team_id: str, ref: str) -> tuple[Template, Sequence[Any]]:
        template = self.template(team_id, ref)
        return template, self._records.tags(template.id)

    def tag_history(self, team_id: str, ref: str, tag: str | None) -> Sequence[Any]:
        template = self.template(team_id, ref)
        return self._records.tag_history(template.id, tag)


class _LogSink(BuildLog):
    """Buffers a build's log lines and writes them to the store in batches: at most
    ``_FLUSH_LINES`` lines or ``_FLUSH_S`` seconds late, so a step's output shows while it
    runs, even when it then goes quiet (thread-safe)."""

    def __init__(self, records: TemplateRecords, build_id: str) -> None:
        self._records = records
        self._build_id = build_id
        self._pending: list[tuple[datetime, str, str | None, str]] = []
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def __call__(self, level: str, step: str | None, message: str) -> None:
        with self._lock:
            self._pending.append((datetime.now(UTC), level, step, message))
            full = len(self._pending) >= _FLUSH_LINES
            if not full and self._timer is None:
                self._timer = threading.Timer(_FLUSH_S, self.flush)
                self._timer.daemon = True
                self._timer.start()
        if full:
            self.flush()

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
            timer, self._timer = self._timer, None
            if timer is not None:
                timer.cancel()
            if pending:
                self._records.append_logs(self._build_id, pending)


def _split_name(name: str, tags: Sequence[str]) -> tuple[str, list[str]]:
    alias, _, tag = name.partition(":")
    if not _ALIAS.fullmatch(alias):
        raise InvalidRequest(
            f"invalid template name {alias!r}: use lowercase letters, digits, '-' and '_'"
        )
    wanted = [_check_tag(t) for t in ([tag] if tag else []) + list(tags)]
    return alias, list(dict.fromkeys(wanted or [DEFAULT_TAG]))


def _check_tag(tag: str) -> str:
    if not isinstance(tag, str) or not _TAG.fullmatch(tag):
        raise InvalidRequest(
            f"invalid tag {tag!r}: use letters, digits, '.', '_' and '-' (up to 128)"
        )
    return tag


def _from_template(plan: BuildPlan, name: str) -> BuildPlan:
    return BuildPlan(
        from_image=None,
        from_template=name,
        steps=plan.steps,
        start_cmd=plan.start_cmd,
        ready_cmd=plan.ready_cmd,
        force=plan.force,
    )


def _upload_key(path: Path) -> bytes:
    """The key that signs upload URLs, made once (0600) and kept across restarts, so a URL
    handed out before a restart still works."""
    return install_key(path)


def _new_id() -> str:
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(20))
