"""The operator console: server-rendered pages under ``/ui`` (Jinja2, htmx for live parts).

Trust: the browser and its user are the console's callers; the console trusts them exactly as
much as the API key they signed in with. What is enforced here:

* Every page and fragment needs a session (``_sessions``); every state-changing request
  (``POST``) needs the session's CSRF token and a key that is not read-only. A ``read`` key
  sees every page of its team and is refused every action with a message saying why.
* Every read and action goes through the same service call the API uses with the same
  principal, so a team sees and touches only its own sandboxes, approvals, runs and audit
  records; another team's sandbox is a 404 here as there.
* Pages are rendered with autoescaping: sandbox metadata, tool arguments and audit fields
  are the sandbox's or the agent's words, never markup.
* Responses carry a strict Content-Security-Policy (scripts and styles from this origin
  only), ``X-Frame-Options: DENY`` and ``no-store`` caching.

Not here: the terminal's WebSocket (``_terminal``), and the services' own rules.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode, urlsplit

import structlog
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from sandgate.access import Principal, authenticate_api_key, hash_secret
from sandgate.agents.runner import AgentRunner
from sandgate.api.e2b.guest_rpc import guest_failure
from sandgate.api.e2b.uploads import Upload, UploadLimits
from sandgate.approvals import ApprovalState
from sandgate.console import _files
from sandgate.console._charts import charts, spark
from sandgate.console._sessions import COOKIE, READ_SCOPE, ConsoleSession, SessionTable
from sandgate.console._terminal import Terminal
from sandgate.console._views import (
    age,
    clock,
    dag_levels,
    describe_event,
    filesize,
    parse_time,
    remaining,
)
from sandgate.errors import (
    Forbidden,
    InvalidRequest,
    NotFound,
    SandboxUnavailable,
    SandgateError,
)
from sandgate.guest.client import GuestClient, GuestError
from sandgate.sandboxes import CreateRequest, SandboxService
from sandgate.store import KEPT_STATES, Store, TelemetryRecords
from sandgate.templates.builds import BuildService
from sandgate.tools import Gateway
from sandgate.workflows.service import WorkflowService

__all__ = ["ASSETS_DIR", "Console"]

log = structlog.get_logger("sandgate.console")

_HERE: Final = Path(__file__).parent
#: The npm project whose ``node_modules`` holds the third-party browser assets.
ASSETS_DIR: Final = _HERE / "assets"
#: Vendor files served under ``/ui/static/vendor/<name>``, by their path in ``node_modules``.
VENDOR: Final = {
    "htmx.min.js": "htmx.org/dist/htmx.min.js",
    "xterm.js": "@xterm/xterm/lib/xterm.js",
    "xterm.css": "@xterm/xterm/css/xterm.css",
    "addon-fit.js": "@xterm/addon-fit/lib/addon-fit.js",
}
_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
        "base-uri 'none'; form-action 'self'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_READ_ONLY: Final = (
    "this API key is read-only (scope read): it may look at every page of its team but take "
    "no action; sign in with a full key to {what}"
)
_BAD_CSRF: Final = (
    "the form's CSRF token is missing or wrong (an old page, or a request from another "
    "site): reload the page and try again"
)
_TIMEOUT_MAX_S: Final = 24 * 3600
#: How far back a list row's sparklines and a sandbox page's charts reach.
_SPARK_WINDOW_MS: Final = 5 * 60 * 1000
_CHART_WINDOW_MS: Final = 3600 * 1000


class _SignIn(Exception):
    """No valid session: pages redirect to the sign-in page, fragments and actions 401."""


class Console:
    """The console's ASGI app (``app``), mounted by the server at ``/ui``."""

    def __init__(
        self,
        *,
        store: Store,
        sandboxes: SandboxService,
        gateway: Gateway,
        agents: AgentRunner,
        workflows: WorkflowService,
        runtime: str,
        uploads: UploadLimits,
        templates: BuildService,
    ) -> None:
        self._store = store
        self._uploads = uploads
        self._templates = templates
        self._telemetry = TelemetryRecords(store)
        self._sandboxes = sandboxes
        self._gateway = gateway
        self._agents = agents
        self._workflows = workflows
        self._runtime = runtime
        self.sessions = SessionTable(store)
        self._pages = Jinja2Templates(directory=str(_HERE / "templates"))
        self._pages.env.filters["age"] = age
        self._pages.env.filters["remaining"] = remaining
        self._pages.env.filters["filesize"] = filesize
        self._pages.env.filters["clock"] = clock
        self._pages.env.filters["pretty"] = lambda v: json.dumps(v, indent=2, sort_keys=True)
        self._terminal = Terminal(self.sessions, sandboxes)
        routes = [
            Route("/", self._home),
            Route("/login", self._login_page, methods=["GET"]),
            Route("/login", self._login, methods=["POST"]),
            Route("/logout", self._logout, methods=["POST"]),
            Route("/sandboxes", self._sandboxes_page),
            Route("/sandboxes/rows", self._sandbox_rows),
            Route("/sandboxes/{sandbox_id}", self._sandbox_page),
            Route("/sandboxes/{sandbox_id}/processes", self._processes),
            Route("/sandboxes/{sandbox_id}/metrics", self._metrics),
            Route("/sandboxes/{sandbox_id}/files", self._files),
            Route("/sandboxes/{sandbox_id}/download", self._download),
            Route("/sandboxes/{sandbox_id}/upload", self._upload, methods=["POST"]),
            Route("/sandboxes/{sandbox_id}/{action}", self._sandbox_action, methods=["POST"]),
            WebSocketRoute("/sandboxes/{sandbox_id}/terminal", self._terminal.__call__),
            Route("/approvals", self._approvals_page),
            Route("/approvals/rows", self._approval_rows),
            Route("/approvals/{approval_id}/{decision}", self._decide, methods=["POST"]),
            Route("/audit", self._audit_page),
            Route("/runs", self._runs_page),
            Route("/runs/{run_id}", self._run_page),
            Route("/workflows/{run_id}", self._workflow_page),
            Route("/templates", self._templates_page),
            Route("/templates/{template_id}", self._template_page),
            Route("/templates/{template_id}/start", self._start_sandbox, methods=["POST"]),
            Route("/templates/{template_id}/builds/{build_id}", self._build_page),
            Route("/templates/{template_id}/builds/{build_id}/log", self._build_log),
            Route("/static/vendor/{name}", self._vendor),
            Mount("/static", StaticFiles(directory=str(_HERE / "static")), name="static"),
        ]
        self.app = Starlette(
            routes=routes,
            exception_handlers={_SignIn: self._sign_in, SandgateError: self._error},
        )

    # -- sessions ---------------------------------------------------------------------------

    def _session(self, request: Request) -> ConsoleSession:
        session = self.sessions.get(request.cookies.get(COOKIE))
        if session is None:
            raise _SignIn
        return session

    async def _action(self, request: Request, what: str) -> tuple[ConsoleSession, FormData]:
        """The session of a state-changing request, its CSRF token checked, and its form.

        SECURITY: the token is checked before the role, so a forged request learns nothing;
        a read-only key is refused here, before any service is called."""
        session = self._session(request)
        form = await request.form()
        presented = form.get("csrf") or request.headers.get("x-csrf-token")
        if not session.csrf_ok(presented if isinstance(presented, str) else None):
            raise Forbidden(_BAD_CSRF)
        if session.read_only:
            raise Forbidden(_READ_ONLY.format(what=what))
        return session, form

    def _render(
        self,
        request: Request,
        name: str,
        session: ConsoleSession | None,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        context.update(session=session, runtime=self._runtime, assets=missing_assets(ASSETS_DIR))
        response = self._pages.TemplateResponse(request, name, context, status_code=status)
        response.headers.update(_HEADERS)
        return response

    async def _sign_in(self, request: Request, _: Exception) -> Response:
        if request.method == "GET" and "hx-request" not in request.headers:
            target = urlencode({"next": request.url.path})
            return RedirectResponse(f"/ui/login?{target}", status_code=303, headers=_HEADERS)
        response = HTMLResponse(
            "<p class=error>Your console session ended: sign in again.</p>", status_code=401
        )
        response.headers.update({**_HEADERS, "HX-Redirect": "/ui/login"})
        return response

    async def _error(self, request: Request, exc: Exception) -> Response:
        error = exc if isinstance(exc, SandgateError) else SandgateError(str(exc))
        if "hx-request" in request.headers:
            response = HTMLResponse(
                self._pages.env.get_template("_error.html").render(error=error),
                status_code=error.status,
            )
            response.headers.update(_HEADERS)
            return response
        session = self.sessions.get(request.cookies.get(COOKIE))
        return self._render(request, "error.html", session, status=error.status, error=error)

    async def _home(self, request: Request) -> Response:
        self._session(request)
        return RedirectResponse("/ui/sandboxes", status_code=303)

    async def _login_page(self, request: Request) -> Response:
        return self._render(request, "login.html", None, next=_local(request, None))

    async def _login(self, request: Request) -> Response:
        """Signs in with an API key (full or ``read``). SECURITY: the key is read from the
        form body only, never the URL; only a session id goes back, in the cookie."""
        if _foreign(request):
            raise Forbidden("sign-in refused: the form was posted from another site")
        form = await request.form()
        key = form.get("api_key")
        try:
            authenticate_api_key(
                self._store, key if isinstance(key, str) else None, scope=READ_SCOPE
            )
        except SandgateError as exc:
            return self._render(
                request,
                "login.html",
                None,
                status=exc.status,
                error=exc.message,
                next=_local(request, form.get("next")),
            )
        cookie, session = self.sessions.open(hash_secret(str(key)))
        log.info("console.signed_in", key=session.principal.api_key_id, read_only=session.read_only)
        response = RedirectResponse(_local(request, form.get("next")), status_code=303)
        response.set_cookie(
            COOKIE,
            cookie,
            max_age=int(session.expires - datetime.now(UTC).timestamp()),
            path="/ui",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )
        return response

    async def _logout(self, request: Request) -> Response:
        session = self._session(request)
        form = await request.form()
        presented = form.get("csrf")
        if not session.csrf_ok(presented if isinstance(presented, str) else None):
            raise Forbidden(_BAD_CSRF)
        self.sessions.close(request.cookies.get(COOKIE))
        response = RedirectResponse("/ui/login", status_code=303)
        response.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict")
        return response

    # -- sandboxes --------------------------------------------------------------------------

    def _template_names(self, principal: Principal) -> dict[str, str]:
        return {
            t.id: t.display_name
            for t in self._store.list_templates()
            if t.team_id is None or t.team_id == principal.team_id
        }

    def _sandbox_list(self, request: Request, session: ConsoleSession) -> dict[str, Any]:
        state = request.query_params.get("state") or ""
        template = request.query_params.get("template") or ""
        if state and state not in KEPT_STATES:
            raise InvalidRequest(
                f"unknown state {state[:40]!r}: use one of {', '.join(KEPT_STATES)}"
            )
        names = self._template_names(session.principal)
        page = self._store.list_sandboxes(
            session.principal.team_id, [state] if state else list(KEPT_STATES), {}, 500, None
        )
        rows = [
            s
            for s in page.sandboxes
            if not template or names.get(s.template_id, s.template_id) == template
        ]
        since = int(datetime.now(UTC).timestamp() * 1000) - _SPARK_WINDOW_MS
        samples = self._telemetry.recent_samples([s.id for s in rows], since)
        return {
            "sandboxes": rows,
            "sparks": {sandbox_id: spark(found) for sandbox_id, found in samples.items()},
            "names": names,
            "state": state,
            "template": template,
            "states": KEPT_STATES,
            "query": urlencode({"state": state, "template": template}),
        }

    async def _sandboxes_page(self, request: Request) -> Response:
        session = self._session(request)
        listing = await asyncio.to_thread(self._sandbox_list, request, session)
        return self._render(request, "sandboxes.html", session, **listing)

    async def _sandbox_rows(self, request: Request) -> Response:
        session = self._session(request)
        listing = await asyncio.to_thread(self._sandbox_list, request, session)
        return self._render(request, "_sandbox_rows.html", session, **listing)

    async def _sandbox_page(self, request: Request) -> Response:
        session = self._session(request)
        row = self._sandboxes.get(session.principal, request.path_params["sandbox_id"])
        names = self._template_names(session.principal)
        return self._render(
            request,
            "sandbox.html",
            session,
            sandbox=row,
            template=names.get(row.template_id, row.template_id),
            done=request.query_params.get("done"),
            path=request.query_params.get("path") or "",
        )

    async def _metrics(self, request: Request) -> Response:
        """The sandbox page's CPU and memory charts (the last hour of the sampler's samples,
        the ones ``GET /sandboxes/{id}/metrics`` serves)."""
        session = self._session(request)
        row = self._sandboxes.get(session.principal, request.path_params["sandbox_id"])
        now_ms = int(datetime.now(UTC).timestamp() * 1000)
        start_ms = max(int(row.started_at.timestamp() * 1000), now_ms - _CHART_WINDOW_MS)
        samples = await asyncio.to_thread(self._telemetry.samples, row.id, start_ms, now_ms, 10**5)
        return self._render(request, "_metrics.html", session, sandbox=row, charts=charts(samples))

    async def _processes(self, request: Request) -> Response:
        session = self._session(request)
        row = self._sandboxes.get(session.principal, request.path_params["sandbox_id"])
        route = self._sandboxes.route(row.id) if row.state == "running" else None
        try:
            processes = await route.guest.list_processes() if route is not None else None
        except GuestError as exc:  # stopped meanwhile: the fragment says so, the poll goes on
            raise guest_failure(exc) from None
        return self._render(request, "_processes.html", session, sandbox=row, processes=processes)

    # -- files ------------------------------------------------------------------------------

    def _guest(self, request: Request, session: ConsoleSession) -> GuestClient:
        """The guest of the session's sandbox named in the path; refused unless it runs."""
        row = self._sandboxes.get(session.principal, request.path_params["sandbox_id"])
        route = self._sandboxes.route(row.id) if row.state == "running" else None
        if route is None:
            raise SandboxUnavailable(
                f"the sandbox is {row.state}: resume it to browse or transfer its files"
            )
        return route.guest

    async def _files(self, request: Request) -> Response:
        """The file browser's fragment: one directory of the sandbox (default: home)."""
        session = self._session(request)
        row = self._sandboxes.get(session.principal, request.path_params["sandbox_id"])
        context: dict[str, Any] = {"sandbox": row, "listing": None, "error": None}
        if row.state == "running":
            try:
                context["listing"] = await _files.listing(
                    self._guest(request, session), request.query_params.get("path")
                )
            except SandgateError as exc:
                if "hx-request" not in request.headers:
                    raise
                # htmx swaps only a 2xx answer: the fragment itself says what went wrong.
                context["error"] = exc.message
        return self._render(request, "_files.html", session, **context)

    async def _download(self, request: Request) -> Response:
        session = self._session(request)
        guest = self._guest(request, session)
        response = await _files.download(guest, request.query_params.get("path"))
        response.headers.update({**_HEADERS, "Cache-Control": "no-store"})
        log.info(
            "console.download",
            sandbox=request.path_params["sandbox_id"],
            key=session.principal.api_key_id,
        )
        return response

    async def _upload(self, request: Request) -> Response:
        """A file from the browser's form into a directory of the sandbox.

        SECURITY: the CSRF token comes in the form's URL (``?csrf=``), not its body, so
        that it and the role are checked before a byte of the body is read, and the body
        streams to the guest under the E2B upload path's limits without being parsed by
        Starlette (which would stage it on the host). The token is no credential (only this
        session's cookie makes it count) and pages send ``Referrer-Policy: same-origin``."""
        session = self._session(request)
        presented = request.query_params.get("csrf") or request.headers.get("x-csrf-token")
        receiving = Upload(request, self._uploads)
        try:
            if not session.csrf_ok(presented):
                raise Forbidden(_BAD_CSRF)
            if session.read_only:
                raise Forbidden(_READ_ONLY.format(what="upload files"))
            directory = request.query_params.get("dir")
            guest = self._guest(request, session)
            entries = await _files.upload(receiving, request, guest, directory)
        except SandgateError as exc:
            response = await self._error(request, exc)
            if not receiving.finished:
                # Refused before the body ended: the rest is never read (files.py does so).
                response.headers["connection"] = "close"
            return response
        log.info(
            "console.upload",
            sandbox=request.path_params["sandbox_id"],
            path=entries[0].path,
            key=session.principal.api_key_id,
        )
        target = urlencode({"done": f"uploaded {entries[0].path}", "path": directory or ""})
        return RedirectResponse(
            f"/ui/sandboxes/{request.path_params['sandbox_id']}?{target}#files", status_code=303
        )

    async def _sandbox_action(self, request: Request) -> Response:
        sandbox_id = request.path_params["sandbox_id"]
        action = request.path_params["action"]
        actions: dict[str, Callable[[Principal, FormData], Awaitable[Any]]] = {
            "kill": lambda p, _: self._sandboxes.kill(p, sandbox_id),
            "pause": lambda p, _: self._sandboxes.pause(p, sandbox_id),
            "resume": lambda p, f: self._sandboxes.connect(p, sandbox_id, _seconds(f)),
            "timeout": lambda p, f: self._sandboxes.change_timeout(p, sandbox_id, _seconds(f)),
        }
        if action not in actions:
            raise NotFound(f"no console action {action[:40]!r} on sandboxes")
        session, form = await self._action(request, f"{action} sandboxes")
        await actions[action](session.principal, form)
        log.info(
            "console.sandbox_action",
            action=action,
            sandbox=sandbox_id,
            key=session.principal.api_key_id,
        )
        target = "/ui/sandboxes" if action == "kill" else f"/ui/sandboxes/{sandbox_id}"
        return RedirectResponse(f"{target}?{urlencode({'done': action})}", status_code=303)

    # -- approvals --------------------------------------------------------------------------

    def _pending(self, principal: Principal) -> list[Any]:
        return [
            a
            for a in self._gateway.approvals.list_approvals(ApprovalState.PENDING)
            if a.subject.get("team") == principal.team_id
        ]

    async def _approvals_page(self, request: Request) -> Response:
        session = self._session(request)
        pending = await asyncio.to_thread(self._pending, session.principal)
        return self._render(
            request,
            "approvals.html",
            session,
            approvals=pending,
            done=request.query_params.get("done"),
        )

    async def _approval_rows(self, request: Request) -> Response:
        session = self._session(request)
        pending = await asyncio.to_thread(self._pending, session.principal)
        return self._render(request, "_approval_rows.html", session, approvals=pending)

    async def _decide(self, request: Request) -> Response:
        approval_id = request.path_params["approval_id"]
        decision = request.path_params["decision"]
        if decision not in ("approve", "deny"):
            raise NotFound(f"no console action {decision[:40]!r} on approvals")
        session, _ = await self._action(request, f"{decision} calls")
        approval = self._gateway.approvals.get(approval_id)
        if approval.subject.get("team") != session.principal.team_id:
            raise NotFound(f"approval '{approval_id}' not found")
        self._gateway.approvals.decide(
            approval_id,
            approve=decision == "approve",
            by=f"console:{session.principal.api_key_id}",
        )
        done = urlencode({"done": f"{approval_id} {decision}d"})
        return RedirectResponse(f"/ui/approvals?{done}", status_code=303)

    # -- audit ------------------------------------------------------------------------------

    async def _audit_page(self, request: Request) -> Response:
        session = self._session(request)
        q = request.query_params
        fields = {
            k: (q.get(k) or "").strip()
            for k in ("tool", "outcome", "agent", "sandbox", "kind", "since", "until", "before")
        }
        kinds = {"": None, "tool": "tool.", "egress": "egress.", "sandbox": "sandbox."}
        if fields["kind"] not in kinds:
            raise InvalidRequest("kind must be tool, egress or sandbox (or empty for all)")
        before = fields["before"]
        if before and not before.isdigit():
            raise InvalidRequest("before must be a record number")
        rows = await asyncio.to_thread(
            self._store.search_audit,
            team_id=session.principal.team_id,
            tool=fields["tool"] or None,
            outcome=fields["outcome"] or None,
            agent=fields["agent"] or None,
            sandbox_id=fields["sandbox"] or None,
            event_prefix=kinds[fields["kind"]],
            since=parse_time("since", fields["since"]),
            until=parse_time("until", fields["until"]),
            before_seq=int(before) if before else None,
            limit=100,
        )
        older = urlencode({**fields, "before": rows[-1].seq}) if len(rows) == 100 else None
        return self._render(
            request,
            "audit.html",
            session,
            rows=rows,
            fields=fields,
            health=self._gateway.audit.health,
            older=older,
        )

    # -- runs, workflows, templates ---------------------------------------------------------

    async def _runs_page(self, request: Request) -> Response:
        session = self._session(request)
        runs = await asyncio.to_thread(self._agents.list_runs, session.principal, limit=100)
        flows = await asyncio.to_thread(self._workflows.runs, session.principal, limit=100)
        return self._render(request, "runs.html", session, runs=runs, flows=flows)

    async def _run_page(self, request: Request) -> Response:
        session = self._session(request)
        run = self._agents.run(session.principal, request.path_params["run_id"])
        events = [describe_event(e.type, e.data) for e in self._agents.trace(run.id)]
        return self._render(request, "run.html", session, run=run, events=events)

    async def _workflow_page(self, request: Request) -> Response:
        session = self._session(request)
        run = self._workflows.run(session.principal, request.path_params["run_id"])
        steps = self._workflows.steps(run.id)
        return self._render(request, "workflow.html", session, run=run, levels=dag_levels(steps))

    async def _templates_page(self, request: Request) -> Response:
        session = self._session(request)
        team = session.principal.team_id
        rows = [t for t in self._store.list_templates() if t.team_id in (None, team)]
        return self._render(
            request,
            "templates.html",
            session,
            templates=rows,
            done=request.query_params.get("done"),
        )

    async def _template_page(self, request: Request) -> Response:
        """A template and its builds, newest first (a shipped template has none here: it is
        built by ``sandgate templates build``)."""
        session = self._session(request)
        template = self._templates.template(
            session.principal.team_id, request.path_params["template_id"]
        )
        builds = await asyncio.to_thread(self._templates.builds, template)
        return self._render(
            request,
            "template.html",
            session,
            template=template,
            builds=sorted(builds, key=lambda b: b.created_at, reverse=True),
        )

    def _build_view(self, request: Request, session: ConsoleSession) -> dict[str, Any]:
        build = self._templates.build(
            session.principal.team_id,
            request.path_params["template_id"],
            request.path_params["build_id"],
        )
        # The log the E2B build status endpoint serves (``logs``), every line of it.
        entries = self._templates.logs(build.id, 0, 10**6)
        return {"build": build, "entries": entries}

    async def _build_page(self, request: Request) -> Response:
        session = self._session(request)
        template = self._templates.template(
            session.principal.team_id, request.path_params["template_id"]
        )
        view = await asyncio.to_thread(self._build_view, request, session)
        return self._render(request, "build.html", session, template=template, **view)

    async def _build_log(self, request: Request) -> Response:
        """The build's state and log, polled by its page while it runs."""
        session = self._session(request)
        view = await asyncio.to_thread(self._build_view, request, session)
        return self._render(request, "_build_log.html", session, **view)

    async def _start_sandbox(self, request: Request) -> Response:
        """Starts a sandbox from the template through the same service call as E2B's
        ``POST /sandboxes`` (the session's team, its quotas and the template's resources),
        then shows it."""
        template_id = request.path_params["template_id"]
        session, form = await self._action(request, "start sandboxes")
        template = self._templates.template(session.principal.team_id, template_id)
        row = await self._sandboxes.create(
            session.principal,
            CreateRequest(
                template=template.id,
                timeout_s=_seconds(form),
                metadata={},
                envs={},
                # E2B's default (as the API's): only what egress.internet_access lists.
                allow_internet_access=True,
            ),
        )
        log.info(
            "console.sandbox_started",
            template=template.id,
            sandbox=row.id,
            key=session.principal.api_key_id,
        )
        done = urlencode({"done": f"started from {template.display_name}"})
        return RedirectResponse(f"/ui/sandboxes/{row.id}?{done}", status_code=303)

    # -- assets -----------------------------------------------------------------------------

    async def _vendor(self, request: Request) -> Response:
        """A third-party asset from ``assets/node_modules`` (installed by ``npm ci``)."""
        from starlette.responses import FileResponse

        relative = VENDOR.get(request.path_params["name"])
        if relative is None:
            raise NotFound("no such console asset")
        path = ASSETS_DIR / "node_modules" / relative
        if not path.is_file():
            raise NotFound(
                f"console asset {request.path_params['name']} is not installed: run "
                "scripts/console-assets (npm ci in src/sandgate/console/assets)"
            )
        return FileResponse(path, headers={"Cache-Control": "max-age=3600"})


def missing_assets(directory: Path) -> list[str]:
    """The vendor files not installed in ``directory`` (the npm project): the pages name them
    and say how to install them."""
    return [n for n, rel in VENDOR.items() if not (directory / "node_modules" / rel).is_file()]


def _seconds(form: FormData) -> int:
    raw = form.get("timeout_s")
    if not isinstance(raw, str) or not raw.strip().isdigit():
        raise InvalidRequest("timeout must be a whole number of seconds, e.g. 300")
    value = int(raw.strip())
    if not 1 <= value <= _TIMEOUT_MAX_S:
        raise InvalidRequest(f"timeout must be between 1 and {_TIMEOUT_MAX_S} seconds")
    return value


def _local(request: Request, target: Any) -> str:
    """A redirect target inside the console only (no open redirect)."""
    text = target if isinstance(target, str) else request.query_params.get("next", "")
    if text.startswith("/ui/") and not text.startswith("//") and "\\" not in text:
        return text
    return "/ui/sandboxes"


def _foreign(request: Request) -> bool:
    """Whether a browser says the request comes from another site (``Origin`` not ours)."""
    origin = request.headers.get("origin")
    if origin is None:
        return False
    return urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower()
