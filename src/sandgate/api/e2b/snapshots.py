"""E2B snapshots and forks: save a sandbox's files, list and delete the saves, start sandboxes
from them (``Sandbox.create(snapshot_id)`` passes the snapshot as ``templateID``, which the
create in ``control.py`` resolves).

Routes (shared/e2b-protocol.md §2.3; success codes exactly E2B's):

* ``POST /sandboxes/{id}/snapshots`` ``{"name"?, "memory"?}`` → 201 ``SnapshotInfo``;
* ``GET /snapshots?sandboxID=&name=&limit=&nextToken=`` → 200 ``[SnapshotInfo]``, newest first,
  cursor in ``x-next-token``;
* ``DELETE /templates/{snapshotID}`` (also ``/templates/{namespace}/{name:tag}``, the SDKs that
  do not encode ``/``) → 204, or 404 (the SDK's ``False``) when no snapshot of the caller's
  team has that id or name;
* ``POST /sandboxes/{id}/fork`` ``{"timeout"?, "count"?}`` → 201, one entry per fork:
  ``{"sandbox": Sandbox}`` or ``{"error": {"code", "message"}}``.

A snapshot holds the sandbox's files, not its memory: ``memory: true`` (E2B's default) is
accepted and saves the files; sandboxes made from any snapshot boot fresh
(docs/compatibility.md). Strict input as in ``control.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from sandgate.access import Principal
from sandgate.api.auth import Caller
from sandgate.api.e2b.control import sandbox_body
from sandgate.api.errors import e2b_error
from sandgate.api.strict import QueryInt
from sandgate.errors import InvalidRequest, SnapshotNotFound
from sandgate.sandboxes import SandboxService
from sandgate.store import Sandbox, Snapshot

__all__ = ["TemplateDeleter", "build_snapshots_router"]

_MAX_PAGE = 100
#: E2B's default for a fork's timeout when the call gives none (``SandboxForkRequest``).
_FORK_TIMEOUT_S = 15

#: What ``DELETE /templates/{id}`` does for an id that names no snapshot: the templates
#: service's delete (True: deleted), or None to answer 404.
TemplateDeleter = Callable[[Principal, str], Awaitable[bool]]


class SnapshotBody(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: str | None = Field(None, min_length=1, max_length=200)
    memory: bool | None = None


class ForkBody(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    timeout: int | None = None
    count: int | None = None


def build_snapshots_router(
    service: SandboxService, domain: str, *, delete_template: TemplateDeleter | None = None
) -> APIRouter:
    router = APIRouter()
    snapshots = service.snapshots

    def info(snapshot: Snapshot) -> dict[str, Any]:
        snapshot_id, names = snapshots.describe(snapshot)
        return {"snapshotID": snapshot_id, "names": names}

    @router.post("/sandboxes/{sandbox_id}/snapshots")
    async def create_snapshot(
        sandbox_id: str, caller: Caller, body: SnapshotBody | None = None
    ) -> Response:
        name = body.name if body is not None else None
        saved = await service.snapshot(caller, sandbox_id, name)
        return JSONResponse(info(saved), status_code=201)

    @router.get("/snapshots")
    async def list_snapshots(
        caller: Caller,
        sandbox_id: Annotated[str | None, Query(alias="sandboxID", max_length=64)] = None,
        name: Annotated[str | None, Query(max_length=300)] = None,
        limit: QueryInt | None = None,
        next_token: Annotated[str | None, Query(alias="nextToken")] = None,
    ) -> Response:
        size = _MAX_PAGE if limit is None else limit
        if not 1 <= size <= _MAX_PAGE:
            raise InvalidRequest(f"limit must be between 1 and {_MAX_PAGE}")
        rows, token = snapshots.page(
            caller.team_id, sandbox_id=sandbox_id, name=name, limit=size, next_token=next_token
        )
        headers = {"x-next-token": token} if token else {}
        return JSONResponse([info(row) for row in rows], headers=headers)

    async def delete(caller: Principal, ref: str) -> Response:
        if await snapshots.delete(caller.team_id, ref):
            return Response(status_code=204)
        if delete_template is not None and await delete_template(caller, ref):
            return Response(status_code=204)
        raise SnapshotNotFound(f"no snapshot or template '{ref[:200]}' (see list_snapshots)")

    @router.delete("/templates/{ref}")
    async def delete_snapshot(ref: str, caller: Caller) -> Response:
        return await delete(caller, ref)

    @router.delete("/templates/{namespace}/{ref}")
    async def delete_namespaced(namespace: str, ref: str, caller: Caller) -> Response:
        return await delete(caller, f"{namespace}/{ref}")

    @router.post("/sandboxes/{sandbox_id}/fork")
    async def fork(sandbox_id: str, caller: Caller, body: ForkBody | None = None) -> Response:
        body = body or ForkBody()
        results = await service.fork(
            caller,
            sandbox_id,
            count=1 if body.count is None else body.count,
            timeout_s=_FORK_TIMEOUT_S if body.timeout is None else body.timeout,
        )
        return JSONResponse(
            [
                {"sandbox": sandbox_body(result, domain)}
                if isinstance(result, Sandbox)
                else {
                    "error": {**e2b_error(result.status, result.message), "error_code": result.code}
                }
                for result in results
            ],
            status_code=201,
        )

    return router
