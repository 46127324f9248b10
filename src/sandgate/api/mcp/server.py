"""An MCP server (official ``mcp`` SDK) exposing sandboxes and gateway tools.

Tools offered to the MCP host (Claude Desktop, Claude Code, Cursor, …):

* ``sandbox_create``, ``sandbox_run_code``, ``sandbox_run_command``, ``sandbox_read_file``,
  ``sandbox_write_file``, ``sandbox_kill`` — sandboxes owned by the caller's team, acting
  as the caller's agent (so code inside them calls tools under that agent's policy);
* every gateway tool the policy could allow the caller, under its own name and schema, each
  call going through the gateway pipeline (validation, policy, approval, secrets, audit).

The same server serves stdio (``sandgate mcp``: one fixed caller, the local CLI principal)
and streamable HTTP (``/v1/mcp`` in ``sandgate serve``: the caller of each request, from its
API key; see ``sandgate.api.mcp.http``). Handlers ask ``caller_of(ctx)`` who is calling on
every request, so nothing about the caller is captured when the server is built.

Trust: the host is trusted as much as the principal it runs as; it gets nothing a direct API
caller with that key would not. Arguments of the ``sandbox_*`` tools are checked against their
schemas like a gateway tool's (``tools.validation``: strict JSON values, no coercion), so a
missing ``path`` is an error, never the string ``"None"``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from typing import Any

import mcp_types as types

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from sandgate.agents.execution import LANGUAGES, SandboxCode
from sandgate.agents.steps import CodeStep
from sandgate.api.mcp.caller import McpCaller
from sandgate.errors import InvalidArguments, SandboxUnavailable, SandgateError
from sandgate.guest.client import Ended, GuestError, Output
from sandgate.sandboxes import CreateRequest, SandboxService
from sandgate.tools import AGENT_METADATA_KEY, Gateway
from sandgate.tools.validation import validate_arguments

__all__ = ["CallerOf", "McpCaller", "build_mcp_server"]

_OUTPUT_LIMIT = 20_000
_SANDBOX_ID = {"sandbox_id": {"type": "string", "description": "Id from sandbox_create."}}


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


_SANDBOX_TOOLS = [
    types.Tool(
        name="sandbox_create",
        description="Starts an isolated Linux sandbox; returns its id.",
        input_schema=_schema(
            {"template": {"type": "string", "description": "Template (default base)."}}, []
        ),
    ),
    types.Tool(
        name="sandbox_run_code",
        description="Runs code in a sandbox (python keeps variables between calls; also "
        "bash, javascript, typescript). Returns exit code, stdout and stderr.",
        input_schema=_schema(
            {**_SANDBOX_ID, "code": {"type": "string"}, "language": {"type": "string"}},
            ["sandbox_id", "code"],
        ),
    ),
    types.Tool(
        name="sandbox_run_command",
        description="Runs a shell command in a sandbox (bash -l -c).",
        input_schema=_schema(
            {**_SANDBOX_ID, "command": {"type": "string"}}, ["sandbox_id", "command"]
        ),
    ),
    types.Tool(
        name="sandbox_read_file",
        description="Reads a text file from a sandbox.",
        input_schema=_schema({**_SANDBOX_ID, "path": {"type": "string"}}, ["sandbox_id", "path"]),
    ),
    types.Tool(
        name="sandbox_write_file",
        description="Writes a text file in a sandbox (parents are created).",
        input_schema=_schema(
            {**_SANDBOX_ID, "path": {"type": "string"}, "content": {"type": "string"}},
            ["sandbox_id", "path", "content"],
        ),
    ),
    types.Tool(
        name="sandbox_kill",
        description="Kills a sandbox.",
        input_schema=_schema(_SANDBOX_ID, ["sandbox_id"]),
    ),
]


_SANDBOX_SCHEMAS = {tool.name: tool.input_schema for tool in _SANDBOX_TOOLS}


#: Answers who made the request in ``ctx``; raises ``SandgateError`` (e.g. ``Unauthenticated``).
CallerOf = Callable[[ServerRequestContext[Any, Any]], McpCaller]


def build_mcp_server(
    sandboxes: SandboxService, gateway: Gateway, caller_of: CallerOf
) -> Server[Any]:
    """An MCP server acting, on each request, as ``caller_of(ctx)``."""
    code: dict[str, SandboxCode] = {}  # by sandbox id; reached only after an ownership check

    def gateway_tools(caller: McpCaller) -> list[types.Tool]:
        return [
            types.Tool(name=t.name, description=t.description or t.name, input_schema=t.parameters)
            for t in gateway.visible_tools(caller.subject)
        ]

    async def list_tools(ctx: ServerRequestContext[Any, Any], params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[*_SANDBOX_TOOLS, *gateway_tools(caller_of(ctx))])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        try:
            caller = caller_of(ctx)
            if params.name.startswith("sandbox_"):
                result = await _sandbox_call(caller, params.name, arguments)
            else:
                called = await gateway.call(caller.subject, params.name, arguments)
                if not called.ok:
                    return _error(f"{called.code}: {called.message}")
                result = called.result
        except SandgateError as exc:
            return _error(f"{exc.code}: {exc.message}")
        text = result if isinstance(result, str) else json.dumps(result, default=str)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    async def _sandbox_call(caller: McpCaller, name: str, raw: dict[str, Any]) -> Any:
        schema = _SANDBOX_SCHEMAS.get(name)
        if schema is None:
            raise InvalidArguments(f"unknown tool {shlex.quote(name)}")
        arguments = validate_arguments(name, schema, raw)
        principal, agent = caller.principal, caller.agent
        if name == "sandbox_create":
            metadata = {AGENT_METADATA_KEY: agent} if agent else {}
            row = await sandboxes.create(
                principal,
                CreateRequest(
                    template=str(arguments.get("template") or "base"),
                    timeout_s=None,
                    metadata=metadata,
                    envs={},
                ),
            )
            return {"sandbox_id": row.id}
        sandbox_id = str(arguments.get("sandbox_id", ""))
        sandboxes.get(principal, sandbox_id)  # ownership: another team's is "not found"
        if name == "sandbox_kill":
            await sandboxes.kill(principal, sandbox_id)
            code.pop(sandbox_id, None)
            return {"killed": sandbox_id}
        route = sandboxes.route(sandbox_id)
        if route is None:
            raise SandboxUnavailable(f"sandbox {sandbox_id} is not running")
        guest = route.guest
        try:
            if name == "sandbox_run_code":
                language = LANGUAGES.get(str(arguments.get("language") or "python").lower())
                if language is None:
                    raise InvalidArguments(
                        "language must be python, bash, javascript or typescript"
                    )
                runner = code.setdefault(
                    sandbox_id, SandboxCode(guest, f"mcp-{sandbox_id}", _OUTPUT_LIMIT)
                )
                step = CodeStep(0, language, str(arguments.get("code", "")))
                await runner.run(step, 300)
                return {
                    "exit_code": step.exit_code,
                    "stdout": step.stdout,
                    "stderr": step.stderr,
                    "notes": step.notes,
                }
            if name == "sandbox_run_command":
                command = str(arguments.get("command", ""))
                stream = await guest.spawn("/bin/bash", ["-l", "-c", command], user="user")
                out, err, exit_code = b"", b"", -1
                async for event in stream:
                    if isinstance(event, Output):
                        if event.stream == "stderr":
                            err += event.data
                        else:
                            out += event.data
                    elif isinstance(event, Ended):
                        exit_code = event.exit_code
                return {
                    "exit_code": exit_code,
                    "stdout": out.decode(errors="replace")[-_OUTPUT_LIMIT:],
                    "stderr": err.decode(errors="replace")[-_OUTPUT_LIMIT:],
                }
            if name == "sandbox_read_file":
                reader = await guest.read_file(str(arguments.get("path")), user="user")
                data = await reader.read_all()
                return data.decode(errors="replace")
            if name == "sandbox_write_file":
                path = str(arguments.get("path"))
                await guest.write_file(
                    path, str(arguments.get("content", "")).encode(), user="user"
                )
                return {"written": path}
        except GuestError as exc:
            raise SandboxUnavailable(f"{name} failed: {exc.message}") from None
        raise InvalidArguments(f"unknown tool {shlex.quote(name)}")

    return Server(
        "sandgate",
        instructions="Sandgate: isolated sandboxes and policy-checked tools.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _error(message: str) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=message)], is_error=True
    )
