"""envd's ``GET /metrics`` and ``POST /init``: the sandbox's own resource use, and its
sandbox-level settings, on the data plane (port 49983, the sandbox's access token).

``GET /metrics`` → 200 envd's ``Metrics`` (snake case, unlike the API's ``SandboxMetric``):
``ts`` (unix s), ``cpu_count``, ``cpu_used_pct``, ``mem_total``/``mem_used``/``mem_cache``
(bytes) with ``mem_total_mib``/``mem_used_mib``, ``disk_used``/``disk_total`` (bytes). It is
one reading taken now from the sandbox's cgroup and its disk layer, the same the metrics
sampler stores for ``GET /sandboxes/{id}/metrics`` (``telemetry.metrics``), not stored; its
CPU share is over the time since the last stored sample.

``POST /init`` (envd's orchestrator call) → 204. What it applies, to processes started
afterwards: ``envVars`` (added to the sandbox-level environment), ``defaultUser`` (must exist
in the sandbox; 400 otherwise) and ``defaultWorkdir`` (an absolute path; relative file paths
still resolve against the user's home). What it ignores, because the gateway owns it:
``accessToken`` (the sandbox's token is the gateway's; a request reaching here already
carries it), ``timestamp`` (the sandbox's clock is the host's), ``volumeMounts`` (mounted at
create), ``caBundle`` (egress trust is the proxy's), ``hyperloopIP`` and any other key.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from sandgate.api.e2b.connect import RpcError, json_bytes
from sandgate.api.e2b.guest_rpc import guest_failure
from sandgate.api.e2b.users import parse_username
from sandgate.api.errors import e2b_error_response
from sandgate.errors import SandgateError
from sandgate.guest.client import GuestError
from sandgate.store import SandboxMetricSample

__all__ = ["MetricsSource", "envd_metrics_endpoint", "init"]

#: One reading of a sandbox now, or None when it does not run (``MetricsSampler.current``).
MetricsSource = Callable[[str], Awaitable[SandboxMetricSample | None]]

_MIB: Final = 1024 * 1024
_MAX_BODY: Final = 1024 * 1024
_MAX_ENVS: Final = 1000


def _error(status: int, message: str) -> Response:
    return Response(
        json_bytes({"code": status, "message": message}),
        status_code=status,
        media_type="application/json",
    )


def envd_metrics_endpoint(
    source: MetricsSource | None,
) -> Callable[[Request], Awaitable[Response]]:
    async def metrics(request: Request) -> Response:
        sandbox_id: str = request.scope["sandgate.route"].sandbox_id
        if source is None:
            return _error(502, "metrics are not available on this server")
        try:
            sample = await source(sandbox_id)
        except SandgateError as exc:
            return e2b_error_response(exc)
        if sample is None:
            return _error(502, "the sandbox is not running")
        return Response(json_bytes(metrics_body(sample)), media_type="application/json")

    return metrics


def metrics_body(sample: SandboxMetricSample) -> dict[str, Any]:
    return {
        "ts": sample.time_ms // 1000,
        "cpu_count": sample.cpu_count,
        "cpu_used_pct": sample.cpu_used_pct,
        "mem_total": sample.mem_total,
        "mem_used": sample.mem_used,
        "mem_cache": sample.mem_cache,
        "mem_total_mib": sample.mem_total // _MIB,
        "mem_used_mib": sample.mem_used // _MIB,
        "disk_used": sample.disk_used,
        "disk_total": sample.disk_total,
    }


async def init(request: Request) -> Response:
    route = request.scope["sandgate.route"]
    service = request.scope.get("sandgate.sandboxes")
    if service is None:
        return _error(502, "the sandbox is not reachable")
    raw = await request.body()
    if len(raw) > _MAX_BODY:
        return _error(413, f"the request body is larger than {_MAX_BODY} bytes")
    try:
        envs, user, workdir = _init_body(raw)
    except RpcError as exc:
        return _error(400, exc.message)
    try:
        await service.configure_guest(
            route.sandbox_id, envs=envs, default_user=user, default_workdir=workdir
        )
    except GuestError as exc:  # GuestUnavailable included
        if exc.connect == "unauthenticated":
            return _error(400, f"defaultUser '{user}' does not exist in the sandbox")
        return e2b_error_response(guest_failure(exc))
    except SandgateError as exc:
        return e2b_error_response(exc)
    return Response(status_code=204)


def _init_body(raw: bytes) -> tuple[dict[str, str], str | None, str | None]:
    try:
        body: Any = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise RpcError("invalid_argument", "the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise RpcError("invalid_argument", "the body must be a JSON object")
    envs = body.get("envVars") or {}
    if not isinstance(envs, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in envs.items()
    ):
        raise RpcError("invalid_argument", "envVars must map names to string values")
    if len(envs) > _MAX_ENVS:
        raise RpcError("invalid_argument", f"envVars has more than {_MAX_ENVS} entries")
    for name in envs:
        if not name or "=" in name or "\x00" in name or "\x00" in envs[name]:
            raise RpcError("invalid_argument", f"envVars name {name[:64]!r} is not valid")
    user = body.get("defaultUser")
    if user is not None and not isinstance(user, str):
        raise RpcError("invalid_argument", "defaultUser must be a string")
    if user:
        try:
            parse_username(user)
        except RpcError:
            raise RpcError(
                "invalid_argument", f"defaultUser {user[:64]!r} is not a valid user name"
            ) from None
    workdir = body.get("defaultWorkdir")
    if workdir is not None and (
        not isinstance(workdir, str) or not workdir.startswith("/") or "\x00" in workdir
    ):
        raise RpcError("invalid_argument", "defaultWorkdir must be an absolute path")
    return dict(envs), user or None, workdir or None
