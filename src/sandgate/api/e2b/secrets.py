"""E2B's ``/secrets`` (the SDK's ``Secret``, py >= 2.46, JS 2.51): a team's secrets, by id
(``sec_...``) or name. Values are write-only: no answer ever carries one. Each change is
audited by name and version (never value). Codes are E2B's: 201 on create, 200 on read and
update, 204 on delete, 404 for a secret of another team or none, 409 for a taken name.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from sandgate.access import Principal
from sandgate.api.auth import Caller
from sandgate.api.strict import QueryInt
from sandgate.secrets import TeamSecrets
from sandgate.store import TeamSecret

__all__ = ["build_secrets_router"]

AuditSink = Callable[[dict[str, Any]], Awaitable[None]]


class NewSecretBody(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: str = Field(max_length=1024)
    value: str = Field(max_length=64 * 1024)
    metadata: dict[str, str] | None = None


class SecretUpdateBody(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    value: str = Field(max_length=64 * 1024)
    metadata: dict[str, str] | None = None


def _time(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def secret_body(row: TeamSecret) -> dict[str, Any]:
    """E2B's ``Secret``: metadata only; there is no field for the value."""
    return {
        "secretID": row.id,
        "name": row.name,
        "currentVersion": row.current_version,
        "metadata": dict(row.metadata_ or {}),
        "createdAt": _time(row.created_at),
        "updatedAt": _time(row.updated_at),
    }


def build_secrets_router(secrets: TeamSecrets, audit: AuditSink) -> APIRouter:
    router = APIRouter()

    async def record(event: str, caller: Principal, row: TeamSecret) -> None:
        await audit(
            {
                "event": event,
                "subject": {"team": caller.team_id, "api_key": caller.api_key_id},
                "outcome": "ok",
                "detail": {"secret": row.id, "name": row.name, "version": row.current_version},
            }
        )

    @router.post("/secrets")
    async def create(body: NewSecretBody, caller: Caller) -> Response:
        row = secrets.create(caller.team_id, body.name, body.value, body.metadata)
        await record("secret.created", caller, row)
        return JSONResponse(secret_body(row), status_code=201)

    @router.get("/secrets")
    async def list_secrets(
        caller: Caller,
        limit: QueryInt | None = None,
        next_token: Annotated[str | None, Query(alias="nextToken")] = None,
    ) -> Response:
        page = secrets.page(caller.team_id, limit, next_token)
        headers = {"x-next-token": page.next_token} if page.next_token else {}
        return JSONResponse([secret_body(row) for row in page.secrets], headers=headers)

    @router.get("/secrets/{secret_id}")
    async def get(secret_id: str, caller: Caller) -> Response:
        return JSONResponse(secret_body(secrets.get(caller.team_id, secret_id)))

    @router.post("/secrets/{secret_id}")
    async def update(secret_id: str, body: SecretUpdateBody, caller: Caller) -> Response:
        row = secrets.update(caller.team_id, secret_id, body.value, body.metadata)
        await record("secret.updated", caller, row)
        return JSONResponse(secret_body(row))

    @router.delete("/secrets/{secret_id}")
    async def delete(secret_id: str, caller: Caller) -> Response:
        row = secrets.get(caller.team_id, secret_id)
        secrets.delete(caller.team_id, secret_id)
        await record("secret.deleted", caller, row)
        return Response(status_code=204)

    return router
