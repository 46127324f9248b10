"""The composition root of ``sandgate serve``: config → store → runtime → services → ASGI."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import structlog
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sandgate.access import Principal, authenticate_api_key
from sandgate.api.auth import request_key
from sandgate.api.e2b import (
    UploadLimits,
    build_control_router,
    build_envd_app,
    build_logs_router,
    build_metrics_router,
    build_snapshots_router,
)
from sandgate.api.e2b.registry import Registry, with_registry
from sandgate.api.e2b.secrets import build_secrets_router
from sandgate.api.e2b.teams import build_teams_router
from sandgate.api.e2b.templates import build_templates_router
from sandgate.api.e2b.unserved import CONTROL_UNSERVED, unserved_error
from sandgate.api.e2b.volume_content import build_volume_content_app, with_volume_content
from sandgate.api.e2b.volumes import build_volumes_router
from sandgate.api.errors import e2b_error, e2b_error_response
from sandgate.api.identity import build_identity_router
from sandgate.api.mcp import MCP_PATH, McpHttp
from sandgate.api.ports import PortProxy
from sandgate.api.routing import Router
from sandgate.api.strict import StrictJsonBody
from sandgate.api.v1 import build_v1_router
from sandgate.api.v1.agents import build_agents_router
from sandgate.api.v1.workflows import build_workflows_router
from sandgate.approvals import ApprovalState
from sandgate.channels import build_channels
from sandgate.config import Config
from sandgate.console import Console
from sandgate.errors import SandgateError, TemplateNotFound
from sandgate.observability import tracing
from sandgate.observability.edge import Edge
from sandgate.observability.metrics import Metrics
from sandgate.runtimes import Runtime
from sandgate.runtimes.floors import FloorReport
from sandgate.sandboxes.catalog import ENVD_VERSION
from sandgate.sandboxes.wiring import instance_id
from sandgate.store import SandboxMetricSample, Store, TemplateRecords
from sandgate.templates import layer_backend, prepare_template_tree, remove_stale_builds
from sandgate.templates.builds import BuildService
from sandgate.wiring import build_services, open_home
from sandgate.workflows.runtime import WorkflowRuntime

__all__ = ["Application", "create_app"]

log = structlog.get_logger("sandgate.api")


class Application:
    """Everything one server process holds; ``asgi`` is what uvicorn serves."""

    def __init__(
        self,
        config: Config,
        store: Store,
        runtime: Runtime,
        *,
        floors: FloorReport | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.runtime = runtime
        #: The runtime floors (patched kernel/runtime versions) as judged at start; shown by
        #: GET /health.
        self.floors = floors or FloorReport()
        home = config.home_dir
        # The services of the home, built as the in-process CLI commands build them: the tool
        # gateway (its audit log's head checked first), skills, team secrets, volumes,
        # egress, telemetry, the sandbox lifecycle and the agent runner.
        services = build_services(config, store, runtime, observers=self._observed(config))
        self.gateway = services.gateway
        self.gateway_hook = services.gateway_hook
        self.skills_hook = services.skills_hook
        self.team_secrets = services.team_secrets
        self.volumes = services.volumes
        self.identity = services.identity
        self.egress_hook = services.egress_hook
        self.telemetry = services.telemetry
        self.sandboxes = services.sandboxes
        self.agents = services.agents
        self.channels = build_channels(services)  # chat channels (Telegram), when configured
        if self.metrics is not None:
            self.gateway.audit.on_commit = self.metrics.audit_committed
            self.gateway.on_call = self.metrics.tool_call
            self.sandboxes.on_create = self.metrics.sandbox_created
        # -- team templates: the E2B template API and its build jobs ------------------------
        instance = instance_id(home)
        self.templates = BuildService(
            TemplateRecords(store),
            home=home,
            backends=lambda: layer_backend(config, instance),
            envd_version=ENVD_VERSION,
            max_concurrent=config.templates.max_concurrent_builds,
            max_context_bytes=config.templates.max_context_mib * 1024 * 1024,
            enabled=config.templates.team_builds,
            registered=lambda image_ref: prepare_template_tree(config, image_ref),
            cleanup=lambda: remove_stale_builds(config, instance),
            max_push_bytes=config.templates.max_push_mib * 1024 * 1024,
        )
        # -- workflows: durable DAGs on DBOS, /v1/workflows and /v1/workflow-runs ----------
        self.workflows = WorkflowRuntime(
            config, store, self.gateway, self.sandboxes, self.agents, instance_id=instance
        )
        control = FastAPI(
            title="Sandgate",
            lifespan=self._lifespan,
            docs_url=None,
            redoc_url=None,
        )
        _install_error_handlers(control)
        control.state.store = store  # read by sandgate.api.auth for every route's caller
        # Before the control router: /sandboxes/metrics must not be read as a sandbox id.
        _adopt_routes(control, build_metrics_router(store, self.telemetry))
        _adopt_routes(control, build_logs_router(store, self.telemetry, config.sandbox_logs))
        _adopt_routes(control, build_teams_router(store))
        _adopt_routes(
            control,
            build_control_router(
                self.sandboxes,
                store,
                config.server.sandbox_domain,
                reaches_internet=self.egress_hook.reaches_internet,
                public_traffic=config.sandbox.allow_public_traffic,
            ),
        )
        _adopt_routes(
            control,
            build_templates_router(
                self.templates,
                disk_size_mb=config.limits.disk_mib,
                default_cpu=config.limits.default_cpu_count,
                default_memory=config.limits.default_memory_mb,
                max_cpu=config.limits.max_cpu_count,
                max_memory=config.limits.max_memory_mb,
            ),
        )
        # Snapshots and forks, after the templates (whose DELETE /templates/tags
        # would otherwise be read as a snapshot named "tags"): DELETE /templates/{id} deletes
        # a snapshot of that id or name first, else the team template.
        _adopt_routes(
            control,
            build_snapshots_router(
                self.sandboxes,
                config.server.sandbox_domain,
                delete_template=self._delete_template,
            ),
        )
        _adopt_routes(control, build_secrets_router(self.team_secrets, self._audit_event))
        _adopt_routes(control, build_identity_router(self.identity))  # unauthenticated
        _adopt_routes(control, build_volumes_router(self.volumes, self._audit_event))
        _adopt_routes(control, build_v1_router(self.gateway, store))
        _adopt_routes(control, build_agents_router(self.agents, store))  # agent runner
        _adopt_routes(control, build_workflows_router(self.workflows.service))  # workflows
        # -- MCP over streamable HTTP: /v1/mcp, same keys; sessions in _lifespan ----------
        self.mcp = McpHttp(self.sandboxes, self.gateway, store, self.agents.agent)
        control.router.routes.append(Route(MCP_PATH, self.mcp, name="mcp"))

        # -- the operator console: /ui (its own sessions, CSRF and HTML errors) ------------
        self.console = Console(
            store=store,
            sandboxes=self.sandboxes,
            gateway=self.gateway,
            agents=self.agents,
            workflows=self.workflows.service,
            runtime=runtime.name,
            uploads=UploadLimits(config.limits.max_upload_bytes),
            templates=self.templates,
        )
        control.mount("/ui", self.console.app)

        @control.get("/health")
        async def health() -> dict[str, Any]:
            # ``status`` stays first and "ok" while the server answers (clients and SDK
            # helpers read only it); the rest says whether sandboxes can start here.
            return {
                "status": "ok",
                **floor_health(self.floors, self.runtime.name),
                "audit": self.gateway.audit.health.as_dict(),
                "mcp": self.gateway.registry.mcp_health(),
            }

        if self.metrics is not None:  # Prometheus: GET /metrics, control plane only
            control.router.routes.append(Route("/metrics", self.metrics.endpoint, name="metrics"))

        volume_content = build_volume_content_app(self.volumes)
        _install_error_handlers(volume_content)
        self.asgi: ASGIApp = Router(
            with_registry(  # docker push of E2B's v1 template builds: /v2/ and /v2/e2b/...
                TemplateUploads(
                    with_volume_content(
                        BodyLimit(StrictJsonBody(control), config.server.max_json_body_bytes),
                        volume_content,
                    ),
                    control,
                ),
                Registry(self.templates, store),
            ),
            build_envd_app(
                UploadLimits(config.limits.max_upload_bytes), metrics=self._sandbox_reading
            ),
            self.sandboxes,
            ports=PortProxy(),
        )
        if self.metrics is not None or config.observability.traces:
            self.asgi = Edge(self.asgi, self.metrics)

    def _observed(self, config: Config) -> list[Metrics]:
        """Builds the Prometheus metrics when ``observability.prometheus`` is on (the caller
        hooks them where the events are seen); the list is the lifecycle observer to add."""
        self.metrics: Metrics | None = None
        if not config.observability.prometheus:
            return []
        self.metrics = metrics = Metrics(
            self.store,
            pools=lambda: self.sandboxes.warm_pool_sizes(),
            approvals_pending=lambda: len(
                self.gateway.approvals.list_approvals(ApprovalState.PENDING)
            ),
            token=config.observability.metrics_token,
        )
        return [metrics]

    async def _sandbox_reading(self, sandbox_id: str) -> SandboxMetricSample | None:
        """envd's ``GET /metrics``: one unstored reading of a running sandbox."""
        row = self.store.sandbox(sandbox_id)
        if row is None or row.state != "running":
            return None
        return await self.telemetry.sampler.current(row)

    async def _audit_event(self, record: dict[str, Any]) -> None:
        """An API change (a secret, a volume): written before the call answers; a failure
        is the caller's 503 (the change is made, its record is not)."""
        await asyncio.to_thread(self.gateway.audit.append, record)

    async def _delete_template(self, caller: Principal, ref: str) -> bool:
        """``DELETE /templates/{ref}`` for a ref that names no snapshot: the team template's
        delete; False when the team has no template of that name."""
        try:
            await self.templates.delete(caller.team_id, ref)
        except TemplateNotFound:
            return False
        return True

    @asynccontextmanager
    async def _lifespan(self, _: FastAPI) -> AsyncIterator[None]:
        # The audit log is sealed, written and indexed by a process of its own, beside the
        # event loop's interpreter, which hands it the batches itself (sandgate.audit._process,
        # _pump). It starts in the background (its imports take a moment); until it is
        # ready the writer thread writes.
        logging = self.config.logging
        writer = asyncio.create_task(
            self.gateway.audit.start_loop_writer(
                log_level=logging.level, json_logs=logging.json_logs
            ),
            name="audit-writer-process",
        )
        # The whole log is verified in the background: damage anywhere fails appends closed.
        full_check = asyncio.create_task(
            asyncio.to_thread(self.gateway.audit.check_head, full=True), name="audit-verify"
        )
        await self.gateway.registry.load_mcp(self.gateway.secrets)
        self.templates.recover()
        await self.volumes.sweep()
        await self.sandboxes.start()
        await self.telemetry.start()
        if self.config.observability.traces:
            observed = self.config.observability
            tracing.install(tracing.otlp_provider(observed.service_name, observed.otlp_endpoint))
        await self.agents.start()
        await self.workflows.start()  # after what its steps use: it recovers runs at once
        for channel in self.channels:  # after the runner: a message starts a run at once
            await channel.start()
        log.info("server.ready", runtime=self.runtime.name)
        try:
            async with self.mcp.run():  # MCP sessions end before the services stop
                yield
        finally:
            for channel in self.channels:
                await channel.stop()
            await self.workflows.stop()
            await self.agents.stop()
            await self.templates.stop()
            await self.telemetry.stop()
            await self.sandboxes.stop()
            await self.gateway.registry.close()
            await asyncio.to_thread(self.gateway.approvals.close)
            await full_check
            await writer
            await self.gateway.audit.stop_loop_writer()
            await asyncio.to_thread(self.gateway.audit.close)
            self.store.close()
            if self.config.observability.traces:
                await asyncio.to_thread(tracing.uninstall)


def create_app(config: Config) -> Application:
    """Opens the store (migrating it) and picks the runtime, logging its floors (accepted
    exceptions at every start); raises ``SandgateError``."""
    store, runtime, floors = open_home(config)
    return Application(config, store, runtime, floors=floors)


def floor_health(report: FloorReport, kind: str) -> dict[str, Any]:
    """``/health``'s view of the floors: ``floors`` is ``ok``, ``accepted`` (running with the
    listed exceptions) or ``below`` (creates refused); ``floor_exceptions`` names each
    accepted risk by component and CVE (versions stay in ``sandgate doctor``: the route needs
    no key)."""
    exceptions: dict[str, list[str]] = {}
    for finding in report.accepted(kind):
        cves = exceptions.setdefault(finding.component, [])
        cves += [cve for cve in finding.open_cves if cve not in cves]
    return {
        "runtime": kind,
        "floors": report.state(kind),
        "floor_exceptions": [
            {"component": component, "cves": cves} for component, cves in exceptions.items()
        ],
    }


def _adopt_routes(app: FastAPI, router: APIRouter) -> None:
    """Adds ``router``'s routes to ``app`` as they were built. ``include_router`` would wrap
    them, and FastAPI analyses every wrapped route's parameters a second time at the first
    request (about 90 routes: 0.1-0.2 s of every server start here); these routers
    carry nothing to combine at inclusion (no prefix, tags or dependencies given there: their
    own prefix and dependencies are already in their routes)."""
    app.router.routes.extend(router.routes)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(SandgateError)
    async def sandgate_error(_: Request, exc: SandgateError) -> JSONResponse:
        return e2b_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        if first.get("type") == "json_invalid":
            message, code = "request body is not valid JSON", "invalid_json"
        else:
            message = f"invalid request: {where or 'body'}: {first.get('msg')}"
            code = "invalid_request"
        return JSONResponse({**e2b_error(400, message), "error_code": code}, status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code in (404, 405) and not _route_answered(request, exc):
            return await _no_route(request, exc)
        return JSONResponse(
            e2b_error(exc.status_code, str(exc.detail)), status_code=exc.status_code
        )

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("request.failed", error=repr(exc))
        return JSONResponse(
            e2b_error(500, "internal error; the server log has the details"), status_code=500
        )


def _route_answered(request: Request, exc: StarletteHTTPException) -> bool:
    """A 404 raised by a route's own handler (it was found), not by the router."""
    return exc.status_code == 404 and "endpoint" in request.scope


async def _no_route(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """No route took the request: an E2B endpoint this server lacks answers 501 naming the
    feature (after the API key is checked, as on any route); anything else a clear 404/405."""
    method, path = request.method, request.url.path
    missing = unserved_error(CONTROL_UNSERVED, method, path)
    if missing is not None:
        try:
            authenticate_api_key(request.app.state.store, request_key(request))
        except SandgateError as refused:
            return e2b_error_response(refused)
        return e2b_error_response(missing)
    if exc.status_code == 405:
        message = f"{method} is not allowed on {path[:200]}"
        body = {**e2b_error(405, message), "error_code": "method_not_allowed"}
        return JSONResponse(body, status_code=405, headers=dict(exc.headers or {}))
    message = f"no such endpoint: {method} {path[:200]}"
    body = {**e2b_error(404, message), "error_code": "unknown_endpoint"}
    return JSONResponse(body, status_code=404)


class BodyLimit:
    """Refuses request bodies over ``limit`` bytes with 413 JSON, chunked ones included."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self._app = app
        self._limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > self._limit:
                await self._too_large(send)
                return
        body = bytearray()
        more = True
        messages: list[Message] = []
        while more:
            message = await receive()
            if message["type"] != "http.request":
                messages.append(message)
                break
            body.extend(message.get("body", b""))
            if len(body) > self._limit:
                await self._too_large(send)
                return
            more = message.get("more_body", False)
        replay = [{"type": "http.request", "body": bytes(body), "more_body": False}, *messages]

        async def replayed() -> Message:
            if replay:
                return replay.pop(0)
            return await receive()

        await self._app(scope, replayed, send)

    async def _too_large(self, send: Send) -> None:
        response = JSONResponse(
            e2b_error(413, f"request body larger than {self._limit} bytes"), status_code=413
        )
        await response({"type": "http"}, _never, send)


class TemplateUploads:
    """Sends ``PUT /templates/<id>/files/<hash>/upload`` (a build-context archive, gzip'ed tar,
    no content type) straight to the control app: its route streams it to disk under
    ``templates.max_context_mib``, and the console's file upload (``POST
    /ui/sandboxes/<id>/upload``) too: it streams the form to the sandbox under
    ``limits.max_upload_mib`` (console/_files.py). Everything else goes through the JSON
    checks (``checked``).
    """

    def __init__(self, checked: ASGIApp, control: ASGIApp) -> None:
        self._checked = checked
        self._control = control

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = str(scope.get("path", ""))
        if (
            scope["type"] == "http"
            and scope.get("method") == "PUT"
            and path.startswith("/templates/")
            and path.endswith("/upload")
            and path.count("/") == 5
        ) or (
            scope["type"] == "http"
            and scope.get("method") == "POST"
            and path.startswith("/ui/sandboxes/")
            and path.endswith("/upload")
            and path.count("/") == 4
        ):
            await self._control(scope, receive, send)
            return
        await self._checked(scope, receive, send)


async def _never() -> Message:
    return {"type": "http.disconnect"}
