"""E2B's ``/volumes`` (the SDK's ``Volume``): a team's volumes, by id (or name). Create (201)
and get (200) answer ``VolumeAndToken``, whose ``token`` authorises the volume file API
(``volume_content``); list answers ``Volume`` without tokens; delete is 204, and 409 while a
live sandbox mounts the volume. Creates and deletes are audited.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from sandgate.access import Principal
from sandgate.api.auth import Caller
from sandgate.store import Volume
from sandgate.volumes import VolumeService

__all__ = ["build_volumes_router"]

AuditSink = Callable[[dict[str, Any]], Awaitable[None]]


class NewVolumeBody(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: str = Field(max_length=1024)


def build_volumes_router(volumes: VolumeService, audit: AuditSink) -> APIRouter:
    router = APIRouter()

    def with_token(row: Volume) -> dict[str, Any]:
        return {"volumeID": row.id, "name": row.name, "token": volumes.token(row)}

    async def record(event: str, caller: Principal, row: Volume) -> None:
        await audit(
            {
                "event": event,
                "subject": {"team": caller.team_id, "api_key": caller.api_key_id},
                "outcome": "ok",
                "detail": {"volume": row.id, "name": row.name, "size_mib": row.size_mib},
            }
        )

    @router.post("/volumes")
    async def create(body: NewVolumeBody, caller: Caller) -> Response:
        row = await volumes.create(caller.team_id, body.name)
        await record("volume.created", caller, row)
        return JSONResponse(with_token(row), status_code=201)

    @router.get("/volumes")
    async def list_volumes(caller: Caller) -> Response:
        rows = volumes.of_team(caller.team_id)
        return JSONResponse([{"volumeID": row.id, "name": row.name} for row in rows])

    @router.get("/volumes/{volume_id}")
    async def get(volume_id: str, caller: Caller) -> Response:
        return JSONResponse(with_token(volumes.get(caller.team_id, volume_id)))

    @router.delete("/volumes/{volume_id}")
    async def delete(volume_id: str, caller: Caller) -> Response:
        row = volumes.get(caller.team_id, volume_id)
        await volumes.delete(caller.team_id, volume_id)
        await record("volume.deleted", caller, row)
        return Response(status_code=204)

    return router
