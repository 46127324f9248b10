"""E2B control plane: create, connect, list, inspect, time out, pause and kill sandboxes
(snapshots and forks: ``snapshots.py``).

Success codes are exactly E2B's (the generated Python client reads bodies only for the code it
expects: 201 on create, 200 on connect-while-running, 204 on kill and timeout). Every error is
JSON ``{"code": <status>, "message": ...}``.

Strict input: bodies are strict JSON (``api.strict``) and the models below are ``strict``:
``"300"`` is not a timeout, ``1`` is not ``true``, ``300.0`` is not an integer. Each field has
one spelling (its E2B name; ``template_id`` is an unknown key, ignored like any other).
"""

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from sandgate.access import Principal, traffic_token
from sandgate.api.auth import Caller
from sandgate.api.strict import QueryInt, parse_query
from sandgate.egress.transforms import parse_rules
from sandgate.errors import InvalidRequest
from sandgate.identity import parse_iam
from sandgate.sandboxes import CreateRequest, SandboxService
from sandgate.store import Sandbox, Store
from sandgate.workflows.metadata import RESERVED_PREFIX

__all__ = ["CLIENT_ID", "build_control_router", "sandbox_body"]

#: Deprecated field the Python client still requires; E2B always sends this constant.
CLIENT_ID = "6532622b"
_MAX_PAGE = 100


class EgressBody(BaseModel):
    """The egress part of E2B's ``network`` options, shared by create and ``update_network``:
    hosts to allow (within ``egress.api_allow_out``) and deny (``0.0.0.0/0`` in ``denyOut``
    means every host; allowOut still wins, as in E2B), and header ``rules`` per host, whose
    values may name team secrets (``${e2b.secrets.<name>}``; ``egress.transforms``).
    ``dnsServers`` and ``egressProxy`` have no meaning here (sandboxes have no DNS and one
    way out, the audited proxy): a non-empty one is refused, not ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)

    allow_out: list[str] = Field(default_factory=list, alias="allowOut", max_length=256)
    deny_out: list[str] = Field(default_factory=list, alias="denyOut", max_length=256)
    rules: dict[str, Any] | None = None
    dns_servers: list[str] | None = Field(None, alias="dnsServers")
    egress_proxy: Any = Field(None, alias="egressProxy")

    def egress(self) -> dict[str, Any]:
        """The stored form (``{"allow_out", "deny_out", "rules"}``); raises
        ``InvalidRequest``."""
        if self.dns_servers:
            raise InvalidRequest(
                "network.dnsServers is not supported: sandboxes have no DNS; the egress proxy "
                "resolves the names allowOut permits"
            )
        if self.egress_proxy is not None:
            raise InvalidRequest(
                "network.egressProxy is not supported: sandbox egress always goes through "
                "Sandgate's audited proxy"
            )
        return {
            "allow_out": self.allow_out,
            "deny_out": self.deny_out,
            "rules": parse_rules(self.rules) if self.rules else {},
        }


class NetworkBody(EgressBody):
    """E2B's ``network`` options on create. ``allowPublicTraffic`` defaults to **false** here
    (E2B: true): a sandbox's ports need its ``trafficAccessToken`` unless the caller asks for
    public ports (or the operator made public the default: ``sandbox.allow_public_traffic``)."""

    allow_public_traffic: bool | None = Field(None, alias="allowPublicTraffic")


class NetworkUpdateBody(EgressBody):
    """``PUT /sandboxes/{id}/network``: replaces the egress options; an omitted field is
    cleared (E2B), ``allow_internet_access`` omitted means its default, true."""

    allow_internet_access: bool | None = None


class VolumeMountBody(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    name: str = Field(min_length=1, max_length=128)
    path: str = Field(min_length=1, max_length=1024)


class AutoResumeBody(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    enabled: bool = False


class NewSandbox(BaseModel):
    """``NewSandbox`` (v1) and ``NewSandboxV2``; unknown keys are ignored, as E2B does.
    ``autoPause``/``autoPauseMemory``/``autoResume`` are the SDKs' ``lifecycle``."""

    model_config = ConfigDict(extra="ignore", strict=True)

    template_id: str = Field(alias="templateID", min_length=1, max_length=200)
    timeout: int | None = None
    secure: bool = True
    allow_internet_access: bool | None = None
    env_vars: dict[str, str] = Field(default_factory=dict, alias="envVars")
    metadata: dict[str, str] = Field(default_factory=dict)
    cpu_count: int | None = Field(None, alias="cpuCount")
    memory_mb: int | None = Field(None, alias="memoryMB")
    network: NetworkBody | None = None
    volume_mounts: list[VolumeMountBody] = Field(
        default_factory=list, alias="volumeMounts", max_length=16
    )
    auto_pause: bool | None = Field(None, alias="autoPause")
    auto_pause_memory: bool | None = Field(None, alias="autoPauseMemory")
    auto_resume: AutoResumeBody | None = Field(None, alias="autoResume")
    #: Workload identity tokens ``network.rules`` may use (``sandgate.identity``).
    iam: dict[str, Any] | None = None


class TimeoutBody(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    timeout: int | None = None


class RefreshBody(BaseModel):
    """``SandboxRefreshRequest``: keep the sandbox alive ``duration`` more seconds (E2B:
    0-3600, default and floor 15; ``SandboxService.refresh``)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    duration: int | None = None


class ConnectBody(TimeoutBody):
    """``ConnectSandbox``/``ConnectSandboxV2``/``ResumedSandbox``: ``memory: false`` resumes
    from the saved disk only (E2B's ``on_resume="reboot"``)."""

    memory: bool | None = None


class PauseBody(BaseModel):
    """``SandboxPauseRequest``: ``memory`` (default true) keeps the processes and memory
    (freeze); false saves the files only and frees the rest. ``requireHealthyGuest`` refuses
    the pause when the sandbox's guest does not answer."""

    model_config = ConfigDict(extra="ignore", strict=True)

    memory: bool | None = None
    require_healthy_guest: bool | None = Field(None, alias="requireHealthyGuest")


def _time(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _offline(_: Sandbox) -> bool:
    return False


def sandbox_body(row: Sandbox, domain: str) -> dict[str, Any]:
    """E2B's ``Sandbox`` (create, connect, fork): what an SDK needs to reach the sandbox."""
    return {
        "templateID": row.template_id,
        "alias": row.alias,
        "sandboxID": row.id,
        "clientID": CLIENT_ID,
        "envdVersion": row.envd_version,
        "envdAccessToken": row.access_token,
        "trafficAccessToken": (
            None
            if (row.network or {}).get("allow_public_traffic")
            else traffic_token(row.access_token)
        ),
        "domain": domain,
    }


#: Every internal state as E2B names it (a sandbox paused to disk, or booting again from
#: it, is "paused" to an SDK).
_E2B_STATE = {
    "starting": "running",
    "running": "running",
    "paused": "paused",
    "stored": "paused",
    "resuming": "paused",
}


def build_control_router(
    service: SandboxService,
    store: Store,
    domain: str,
    *,
    reaches_internet: Callable[[Sandbox], bool] = _offline,
    public_traffic: bool = False,
) -> APIRouter:
    """``reaches_internet`` says whether a sandbox's effective egress reaches any public
    host; it is what ``allowInternetAccess`` reports (not the flag the create call sent).
    ``public_traffic`` is ``allowPublicTraffic`` for create calls that do not set it."""
    router = APIRouter()

    def detail_body(row: Sandbox) -> dict[str, Any]:
        return {
            "templateID": row.template_id,
            "alias": row.alias,
            "sandboxID": row.id,
            "clientID": CLIENT_ID,
            "startedAt": _time(row.started_at),
            "endAt": _time(row.end_at),
            "envdVersion": row.envd_version,
            "cpuCount": row.cpu_count,
            "memoryMB": row.memory_mb,
            "diskSizeMB": row.disk_size_mb,
            "state": _E2B_STATE.get(row.state, "running"),
            "metadata": row.metadata_,
            "envdAccessToken": row.access_token,
            # What the sandbox can reach, not what the caller asked for: E2B SDKs send
            # true by default, and the flag grants only egress.internet_access.
            "allowInternetAccess": reaches_internet(row),
            "domain": domain,
            "network": _network_body(row),
            "volumeMounts": [
                {"name": m["name"], "path": m["path"]} for m in row.volume_mounts or []
            ],
            "lifecycle": {"autoResume": row.auto_resume, "onTimeout": row.on_timeout},
        }

    async def create(body: NewSandbox, caller: Principal, default_timeout: int | None) -> Response:
        # SECURITY: workflow metadata names the run whose audit records a sandbox's calls
        # join; only the workflows service may set it (sandgate.workflows.steps).
        reserved = sorted(k for k in body.metadata if k.startswith(RESERVED_PREFIX))
        if reserved:
            raise InvalidRequest(
                f"metadata key '{reserved[0]}' is reserved for Sandgate's workflows"
            )
        row = await service.create(
            caller,
            CreateRequest(
                template=body.template_id,
                timeout_s=body.timeout if body.timeout is not None else default_timeout,
                metadata=body.metadata,
                envs=body.env_vars,
                cpu_count=body.cpu_count,
                memory_mb=body.memory_mb,
                # E2B's default is true; it grants only what egress.internet_access lists.
                allow_internet_access=body.allow_internet_access is not False,
                network=_network(body.network, public_traffic, parse_iam(body.iam)),
                volume_mounts=tuple({"name": m.name, "path": m.path} for m in body.volume_mounts),
                on_timeout="pause" if body.auto_pause else "kill",
                auto_pause_memory=body.auto_pause_memory is not False,
                auto_resume=body.auto_resume is not None and body.auto_resume.enabled,
            ),
        )
        return JSONResponse(sandbox_body(row, domain), status_code=201)

    @router.post("/sandboxes")
    async def create_v1(body: NewSandbox, caller: Caller) -> Response:
        # v1 declares a default of 15 s when the timeout is omitted.
        return await create(body, caller, 15)

    @router.post("/v2/sandboxes")
    async def create_v2(body: NewSandbox, caller: Caller) -> Response:
        return await create(body, caller, 300)

    async def connect(sandbox_id: str, body: ConnectBody, caller: Principal) -> Response:
        row, resumed = await service.connect(
            caller, sandbox_id, body.timeout or 300, memory=body.memory
        )
        return JSONResponse(sandbox_body(row, domain), status_code=201 if resumed else 200)

    @router.post("/sandboxes/{sandbox_id}/connect")
    async def connect_v1(sandbox_id: str, body: ConnectBody, caller: Caller) -> Response:
        return await connect(sandbox_id, body, caller)

    @router.post("/v2/sandboxes/{sandbox_id}/connect")
    async def connect_v2(sandbox_id: str, body: ConnectBody, caller: Caller) -> Response:
        return await connect(sandbox_id, body, caller)

    @router.post("/sandboxes/{sandbox_id}/pause")
    async def pause(sandbox_id: str, caller: Caller, body: PauseBody | None = None) -> Response:
        await service.pause(
            caller,
            sandbox_id,
            memory=body is None or body.memory is not False,
            require_healthy_guest=body is not None and body.require_healthy_guest is True,
        )
        return Response(status_code=204)

    @router.post("/sandboxes/{sandbox_id}/resume")
    async def resume(sandbox_id: str, caller: Caller, body: ConnectBody | None = None) -> Response:
        timeout = body.timeout if body is not None and body.timeout else 300
        memory = body.memory if body is not None else None
        row, _ = await service.connect(caller, sandbox_id, timeout, memory=memory)
        return JSONResponse(sandbox_body(row, domain), status_code=201)

    @router.get("/sandboxes/{sandbox_id}")
    async def get_info(sandbox_id: str, caller: Caller) -> Response:
        return JSONResponse(detail_body(service.get(caller, sandbox_id)))

    @router.delete("/sandboxes/{sandbox_id}")
    async def kill(sandbox_id: str, caller: Caller) -> Response:
        await service.kill(caller, sandbox_id)
        return Response(status_code=204)

    @router.post("/sandboxes/{sandbox_id}/timeout")
    async def set_timeout(sandbox_id: str, body: TimeoutBody, caller: Caller) -> Response:
        if body.timeout is None:
            raise InvalidRequest("timeout is required (seconds)")
        await service.change_timeout(caller, sandbox_id, body.timeout)
        return Response(status_code=204)

    @router.post("/sandboxes/{sandbox_id}/refreshes")
    async def refresh(sandbox_id: str, caller: Caller, body: RefreshBody | None = None) -> Response:
        await service.refresh(caller, sandbox_id, None if body is None else body.duration)
        return Response(status_code=204)

    @router.put("/sandboxes/{sandbox_id}/network")
    async def update_network(sandbox_id: str, body: NetworkUpdateBody, caller: Caller) -> Response:
        await service.update_network(
            caller,
            sandbox_id,
            network=body.egress(),
            allow_internet_access=body.allow_internet_access is not False,
        )
        return Response(status_code=204)

    def list_page(
        caller: Principal,
        metadata: str | None,
        state: list[str] | None,
        limit: int | None,
        next_token: str | None,
    ) -> tuple[list[dict[str, Any]], str | None]:
        states = _parse_states(state)
        pairs = parse_query(metadata) if metadata else []
        wanted = dict(pairs)
        if len(wanted) != len(pairs):
            raise InvalidRequest("metadata names one key twice: give each key once")
        size = _MAX_PAGE if limit is None else limit
        if not 1 <= size <= _MAX_PAGE:
            raise InvalidRequest(f"limit must be between 1 and {_MAX_PAGE}")
        page = service.list_sandboxes(
            caller, states=states, metadata=wanted, limit=size, next_token=next_token
        )
        return [detail_body(row) for row in page.sandboxes], page.next_token

    @router.get("/v2/sandboxes")
    async def list_v2(
        caller: Caller,
        metadata: str | None = None,
        state: Annotated[list[str] | None, Query()] = None,
        limit: QueryInt | None = None,
        next_token: Annotated[str | None, Query(alias="nextToken")] = None,
    ) -> Response:
        rows, token = list_page(caller, metadata, state, limit, next_token)
        headers = {"x-next-token": token} if token else {}
        return JSONResponse(rows, headers=headers)

    @router.get("/sandboxes")
    async def list_v1(caller: Caller, metadata: str | None = None) -> Response:
        rows, _ = list_page(caller, metadata, ["running", "paused"], _MAX_PAGE, None)
        return JSONResponse(rows)

    return router


def _network(
    body: NetworkBody | None, public_default: bool, iam: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The create call's network request as stored; ``allow_public_traffic`` always decided,
    the ``iam`` registration kept beside the rules that use it. Raises ``InvalidRequest``
    (``EgressBody.egress``)."""
    registration = {"iam": iam} if iam else {}
    if body is None:
        stored = {"allow_public_traffic": True} if public_default else {}
        return {**stored, **registration} or None
    public = body.allow_public_traffic
    return {
        **body.egress(),
        "allow_public_traffic": public_default if public is None else public,
        **registration,
    }


def _network_body(row: Sandbox) -> dict[str, Any]:
    """E2B's ``SandboxNetworkConfig`` of a sandbox: what its create or last update asked for
    (rules with their placeholders, never values)."""
    network = row.network or {}
    return {
        "allowOut": list(network.get("allow_out") or []),
        "denyOut": list(network.get("deny_out") or []),
        "allowPublicTraffic": bool(network.get("allow_public_traffic")),
        "rules": dict(network.get("rules") or {}),
    }


def _parse_states(raw: list[str] | None) -> list[str]:
    if not raw:
        return ["running", "paused"]
    names = {part.strip() for value in raw for part in value.split(",") if part.strip()}
    unknown = names - {"running", "paused"}
    if unknown:
        raise InvalidRequest(f"unknown state {sorted(unknown)[0]!r}: use running or paused")
    return sorted(names)
