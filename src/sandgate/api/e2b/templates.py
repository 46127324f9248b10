"""E2B template API: build, upload, poll, tag, list, get, update and delete templates.

Routes and success codes are exactly those the pinned SDKs and the E2B CLI call
(shared/e2b-protocol.md §2.5): ``POST /v3/templates`` (and the early v2 SDKs'
``POST /v2/templates``, the same request in another shape) → 202, the files-hash check → 201 with a
signed upload URL, the build start → 202, status polling with ``logsOffset``, tags 201/204.
Every error is JSON ``{"code", "message"}`` (the generated Python client requires both).

E2B CLI 1.x's v1 flow: ``POST /templates`` (or ``POST /templates/{id}`` to rebuild) → 202 with
a new build id; the client ``docker push``es ``e2b/custom-envs/<templateID>:<buildID>`` to the
registry (``api/e2b/registry.py``); ``POST /templates/{id}/builds/{buildID}`` → 202 builds the
template from that image (``BuildService.start_pushed``).

``DELETE /templates/{id}`` is the snapshots router's (``api/e2b/snapshots.py``): it deletes a
snapshot of that id or name, else the team template (``BuildService.delete``).

The upload URL is the one route here without an API key: like the presigned URL E2B hands
out, its HMAC signature (template, files hash, expiry) is the credential, so the SDK's plain
``PUT`` works unchanged.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from sandgate.api.auth import Caller
from sandgate.api.strict import QueryInt
from sandgate.errors import Forbidden, InvalidRequest, LimitExceeded, NotFound
from sandgate.store import Template, TemplateBuild
from sandgate.templates.builds import DEFAULT_TAG, BuildRequest, BuildService, PushedStart

__all__ = ["build_templates_router"]

_MAX_LOG_PAGE = 100
_BUILD_ID_NAMESPACE = uuid.UUID("5b1f3c36-8a1e-4a57-9d4b-2b1f6c1e7a10")


class TemplateBuildRequestV3(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: str | None = Field(None, max_length=300)
    alias: str | None = Field(None, max_length=300)
    tags: list[str] = Field(default_factory=list, max_length=64)
    cpu_count: int | None = Field(None, alias="cpuCount")
    memory_mb: int | None = Field(None, alias="memoryMB")


class TemplateBuildRequestV2(BaseModel):
    """``POST /v2/templates`` (early v2 SDKs): the v3 request in another shape."""

    model_config = ConfigDict(extra="ignore", strict=True)

    alias: str = Field(max_length=300)
    cpu_count: int | None = Field(None, alias="cpuCount")
    memory_mb: int | None = Field(None, alias="memoryMB")
    team_id: str | None = Field(None, alias="teamID", max_length=100)


class TemplateBuildRequestV1(BaseModel):
    """``POST /templates`` and ``POST /templates/{templateID}`` (E2B CLI 1.x): the image is
    pushed to ``e2b/custom-envs/<templateID>:<buildID>``; the Dockerfile is only informative
    (the client built the image)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    dockerfile: str = Field(max_length=1024 * 1024)
    alias: str | None = Field(None, max_length=300)
    cpu_count: int | None = Field(None, alias="cpuCount")
    memory_mb: int | None = Field(None, alias="memoryMB")
    start_cmd: str | None = Field(None, alias="startCmd", max_length=64 * 1024)
    ready_cmd: str | None = Field(None, alias="readyCmd", max_length=64 * 1024)
    team_id: str | None = Field(None, alias="teamID", max_length=100)


class AssignTags(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    target: str = Field(min_length=1, max_length=300)
    tags: list[str] = Field(max_length=64)


class DeleteTags(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: str = Field(min_length=1, max_length=300)
    tags: list[str] = Field(max_length=64)


class TemplateUpdate(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    public: bool | None = None


def _time(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def build_templates_router(
    builds: BuildService,
    *,
    disk_size_mb: int,
    default_cpu: int,
    default_memory: int,
    max_cpu: int,
    max_memory: int,
) -> APIRouter:
    """``disk_size_mb`` is what every sandbox's disk is (``limits.disk_mib``); the cpu and
    memory bounds are the ``limits`` a template's sandboxes are created with."""
    router = APIRouter()

    def build_id_of(template: Template) -> str:
        if template.build_id:
            return template.build_id
        return str(uuid.uuid5(_BUILD_ID_NAMESPACE, f"{template.id}:{template.digest}"))

    def names(template: Template) -> list[str]:
        return [template.display_name]

    def template_body(template: Template) -> dict[str, Any]:
        builds_of = builds.builds(template) if template.team_id else []
        latest = builds_of[0] if builds_of else None
        status = latest.state if latest is not None else "ready"
        return {
            "templateID": template.id,
            "buildID": build_id_of(template),
            "cpuCount": template.cpu_count,
            "memoryMB": template.memory_mb,
            "diskSizeMB": disk_size_mb,
            "public": bool(template.public or template.team_id is None),
            "aliases": names(template),
            "names": names(template),
            "createdAt": _time(template.created_at),
            "updatedAt": _time(template.updated_at),
            "createdBy": None,
            "lastSpawnedAt": _time(template.last_spawned_at),
            "spawnCount": template.spawn_count or 0,
            "buildCount": len(builds_of) if template.team_id else 1,
            "envdVersion": template.envd_version,
            "buildStatus": status,
            "isDefault": template.team_id is None,
        }

    def build_body(build: TemplateBuild) -> dict[str, Any]:
        body: dict[str, Any] = {
            "buildID": build.id,
            "status": build.state,
            "createdAt": _time(build.created_at),
            "updatedAt": _time(build.updated_at),
            "cpuCount": build.cpu_count,
            "memoryMB": build.memory_mb,
            "diskSizeMB": disk_size_mb,
        }
        if build.finished_at is not None:
            body["finishedAt"] = _time(build.finished_at)
        return body

    def entry_body(entry: Any) -> dict[str, Any]:
        body = {"timestamp": _time(entry.time), "level": entry.level, "message": entry.message}
        if entry.step is not None:
            body["step"] = entry.step
        return body

    def check_size(cpu: int | None, memory: int | None) -> tuple[int, int]:
        cpu = default_cpu if cpu is None else cpu
        memory = default_memory if memory is None else memory
        if not 1 <= cpu <= max_cpu:
            raise LimitExceeded(f"cpuCount must be between 1 and {max_cpu} (limits.max_cpu_count)")
        if not 64 <= memory <= max_memory:
            raise LimitExceeded(
                f"memoryMB must be between 64 and {max_memory} (limits.max_memory_mb)"
            )
        return cpu, memory

    def check_team(caller_team: str, team_id: str | None) -> None:
        if team_id is not None and team_id != caller_team:
            raise Forbidden(
                f"teamID {team_id[:100]!r} is not the API key's team ({caller_team}): omit "
                "teamID or use that team's key"
            )

    def legacy_body(template: Template, build: TemplateBuild) -> dict[str, Any]:
        """E2B's ``TemplateLegacy``: the template, with the new build's id."""
        body = template_body(template)
        body["buildID"] = build.id
        body["cpuCount"] = build.cpu_count
        body["memoryMB"] = build.memory_mb
        return body

    # -- create, upload, start, poll -------------------------------------------------------

    @router.post("/v3/templates")
    async def request_build(body: TemplateBuildRequestV3, caller: Caller) -> Response:
        name = body.name or body.alias
        if not name:
            raise InvalidRequest("name is required")
        cpu, memory = check_size(body.cpu_count, body.memory_mb)
        template, build = builds.request_build(
            caller.team_id, BuildRequest(name, tuple(body.tags), cpu, memory)
        )
        return JSONResponse(
            {
                "templateID": template.id,
                "buildID": build.id,
                "names": names(template),
                "aliases": names(template),
                "tags": list(build.tags),
                "public": bool(template.public),
            },
            status_code=202,
        )

    @router.post("/v2/templates")
    async def request_build_v2(body: TemplateBuildRequestV2, caller: Caller) -> Response:
        check_team(caller.team_id, body.team_id)
        cpu, memory = check_size(body.cpu_count, body.memory_mb)
        template, build = builds.request_build(
            caller.team_id, BuildRequest(body.alias, (), cpu, memory)
        )
        return JSONResponse(legacy_body(template, build), status_code=202)

    @router.post("/templates")
    async def request_build_v1(body: TemplateBuildRequestV1, caller: Caller) -> Response:
        check_team(caller.team_id, body.team_id)
        cpu, memory = check_size(body.cpu_count, body.memory_mb)
        pushed = PushedStart(body.start_cmd, body.ready_cmd)
        name = body.alias or f"template-{uuid.uuid4().hex[:12]}"
        template, build = builds.request_build(
            caller.team_id, BuildRequest(name, (), cpu, memory, pushed)
        )
        return JSONResponse(legacy_body(template, build), status_code=202)

    @router.get("/templates/{template_id}/files/{files_hash}")
    async def files_link(
        template_id: str, files_hash: str, caller: Caller, request: Request
    ) -> Response:
        present, path = builds.upload_link(caller.team_id, template_id, files_hash)
        base = str(request.base_url).rstrip("/")
        return JSONResponse({"present": present, "url": base + path}, status_code=201)

    @router.put("/templates/{template_id}/files/{files_hash}/upload")
    async def upload(
        template_id: str,
        files_hash: str,
        request: Request,
        expires: str = "",
        signature: str = "",
    ) -> Response:
        async def chunks() -> AsyncIterator[bytes]:
            async for chunk in request.stream():
                yield chunk

        await builds.receive_upload(template_id, files_hash, expires, signature, chunks())
        return Response(status_code=200)

    @router.post("/v2/templates/{template_id}/builds/{build_id}")
    async def start_build(
        template_id: str, build_id: str, caller: Caller, request: Request
    ) -> Response:
        body = await request.json()
        if not isinstance(body, dict):
            raise InvalidRequest("the build request must be a JSON object")
        builds.start(caller.team_id, template_id, build_id, body)
        return Response(status_code=202)

    @router.get("/templates/{template_id}/builds/{build_id}/status")
    async def build_status(
        template_id: str,
        build_id: str,
        caller: Caller,
        logs_offset: Annotated[QueryInt | None, Query(alias="logsOffset")] = None,
        limit: QueryInt | None = None,
    ) -> Response:
        build = builds.build(caller.team_id, template_id, build_id)
        offset, size = _page(logs_offset, limit)
        entries = builds.logs(build.id, offset, size)
        body: dict[str, Any] = {
            "templateID": build.template_id,
            "buildID": build.id,
            "status": build.state,
            "logs": [f"[{_time(e.time)}] {e.message}" for e in entries],
            "logEntries": [entry_body(e) for e in entries],
        }
        if build.state == "error":
            reason: dict[str, Any] = {"message": build.reason or "the build failed"}
            if build.reason_step is not None:
                reason["step"] = build.reason_step
            body["reason"] = reason
        return JSONResponse(body)

    @router.get("/templates/{template_id}/builds/{build_id}/logs")
    async def build_logs(
        template_id: str,
        build_id: str,
        caller: Caller,
        cursor: QueryInt | None = None,
        limit: QueryInt | None = None,
        direction: str | None = None,
        level: str | None = None,
    ) -> Response:
        build = builds.build(caller.team_id, template_id, build_id)
        offset, size = _page(cursor, limit)
        entries = list(builds.logs(build.id, 0 if direction == "backward" else offset, 10**6))
        if direction == "backward":
            entries = entries[::-1][offset:]
        if level is not None:
            order = ["debug", "info", "warn", "error"]
            if level not in order:
                raise InvalidRequest("level must be debug, info, warn or error")
            entries = [e for e in entries if order.index(e.level) >= order.index(level)]
        return JSONResponse({"logs": [entry_body(e) for e in entries[:size]]})

    # -- aliases, list, get, update, delete -------------------------------------------------

    @router.get("/templates/aliases/{alias}")
    async def alias(alias: str, caller: Caller) -> Response:
        found = builds.alias_status(caller.team_id, alias)
        if found is None:
            raise NotFound(f"template '{alias}' not found")
        return JSONResponse(
            {"templateID": found.id, "public": bool(found.public or found.team_id is None)}
        )

    @router.get("/templates")
    async def list_v1(caller: Caller) -> Response:
        return JSONResponse([template_body(t) for t in builds.visible(caller.team_id)])

    @router.get("/v2/templates")
    async def list_v2(caller: Caller) -> Response:
        return JSONResponse([template_body(t) for t in builds.visible(caller.team_id)])

    @router.get("/default-templates")
    async def default_templates(caller: Caller) -> Response:
        shipped = [t for t in builds.visible(caller.team_id) if t.team_id is None]
        return JSONResponse([template_body(t) for t in shipped])

    # Tag routes come before /templates/{template_id}: "tags" is not a template id.
    @router.post("/templates/tags")
    async def assign_tags(body: AssignTags, caller: Caller) -> Response:
        build_id, tags = builds.assign_tags(caller.team_id, body.target, body.tags)
        return JSONResponse({"buildID": build_id, "tags": tags}, status_code=201)

    @router.delete("/templates/tags")
    async def delete_tags(body: DeleteTags, caller: Caller) -> Response:
        builds.remove_tags(caller.team_id, body.name, body.tags)
        return Response(status_code=204)

    @router.get("/templates/{template_id}/tags")
    async def list_tags(template_id: str, caller: Caller) -> Response:
        template, tags = builds.tags(caller.team_id, template_id)
        if template.team_id is None:
            return JSONResponse(
                [
                    {
                        "tag": DEFAULT_TAG,
                        "buildID": build_id_of(template),
                        "createdAt": _time(template.created_at),
                    }
                ]
            )
        return JSONResponse(
            [{"tag": t.tag, "buildID": t.build_id, "createdAt": _time(t.assigned_at)} for t in tags]
        )

    @router.get("/templates/{template_id}/tags/count")
    async def count_tags(template_id: str, caller: Caller) -> Response:
        template, tags = builds.tags(caller.team_id, template_id)
        return JSONResponse({"total": len(tags) if template.team_id else 1})

    @router.get("/templates/{template_id}/tags/exists")
    async def tag_exists(template_id: str, caller: Caller, tag: str = "") -> Response:
        if not tag:
            raise InvalidRequest("tag is required")
        template, tags = builds.tags(caller.team_id, template_id)
        known = {t.tag for t in tags} if template.team_id else {DEFAULT_TAG}
        return JSONResponse({"exists": tag in known, "normalizedTag": tag})

    @router.get("/templates/{template_id}/tags/groups")
    async def tag_groups(template_id: str, caller: Caller) -> Response:
        history = builds.tag_history(caller.team_id, template_id, None)
        groups: dict[str, list[dict[str, Any]]] = {}
        for row in history:
            groups.setdefault(row.tag, []).append(assignment_body(row))
        return JSONResponse(
            {
                "tags": [
                    {"tag": tag, "assignments": rows, "hasMore": False}
                    for tag, rows in sorted(groups.items())
                ],
                "nextCursor": None,
            }
        )

    @router.get("/templates/{template_id}/tags/{tag}/assignments")
    async def tag_assignments(template_id: str, tag: str, caller: Caller) -> Response:
        history = builds.tag_history(caller.team_id, template_id, tag)
        return JSONResponse({"data": [assignment_body(r) for r in history], "nextCursor": None})

    def assignment_body(row: Any) -> dict[str, Any]:
        build = builds_by_id(row.build_id)
        return {
            "assignmentId": row.id,
            "buildId": row.build_id,
            "assignedAt": _time(row.assigned_at),
            "buildCreatedAt": _time(build.created_at if build else row.assigned_at),
            "buildFinishedAt": _time(build.finished_at if build else None),
        }

    def builds_by_id(build_id: str) -> TemplateBuild | None:
        return builds.build_row(build_id)

    # After the tag routes: "tags" is not a template id.
    @router.post("/templates/{template_id}")
    async def rebuild_v1(
        template_id: str, body: TemplateBuildRequestV1, caller: Caller
    ) -> Response:
        check_team(caller.team_id, body.team_id)
        cpu, memory = check_size(body.cpu_count, body.memory_mb)
        pushed = PushedStart(body.start_cmd, body.ready_cmd)
        template, build = builds.rebuild(
            caller.team_id, template_id, BuildRequest("", (), cpu, memory, pushed)
        )
        return JSONResponse(legacy_body(template, build), status_code=202)

    @router.post("/templates/{template_id}/builds/{build_id}")
    async def start_pushed_build(template_id: str, build_id: str, caller: Caller) -> Response:
        builds.start_pushed(caller.team_id, template_id, build_id)
        return Response(status_code=202)

    @router.get("/templates/{template_id}")
    async def get_template(template_id: str, caller: Caller) -> Response:
        template = builds.template(caller.team_id, template_id)
        body = template_body(template)
        body["builds"] = (
            [build_body(b) for b in builds.builds(template)] if template.team_id else []
        )
        return JSONResponse(body)

    @router.patch("/templates/{template_id}")
    async def update_v1(template_id: str, body: TemplateUpdate, caller: Caller) -> Response:
        if body.public is not None:
            builds.set_public(caller.team_id, template_id, body.public)
        return Response(status_code=200)

    @router.patch("/v2/templates/{template_id}")
    async def update_v2(template_id: str, body: TemplateUpdate, caller: Caller) -> Response:
        template = builds.own_template(caller.team_id, template_id)
        if body.public is not None:
            template = builds.set_public(caller.team_id, template_id, body.public)
        return JSONResponse({"names": names(template)})

    return router


def _page(offset: int | None, limit: int | None) -> tuple[int, int]:
    offset = 0 if offset is None else offset
    size = _MAX_LOG_PAGE if limit is None else limit
    if offset < 0:
        raise InvalidRequest("logsOffset must not be negative")
    if not 1 <= size <= _MAX_LOG_PAGE:
        raise InvalidRequest(f"limit must be between 1 and {_MAX_LOG_PAGE}")
    return offset, size
