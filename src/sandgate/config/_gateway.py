"""Configuration of the tool gateway: tools, policy, approvals, secrets, audit and agents.

Kept beside ``_model.py`` so the sandbox settings and the gateway settings each read on one
screen; ``Config`` includes these sections. Like every section they are frozen and reject
unknown keys, so a typo in a policy rule is a start-up error naming its path
(``policy.rules.2.efect``), never a silently ignored condition.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Tool names: lowercase identifiers, so they are commands, Python attributes and JS keys.
TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_HHMM = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")
Day = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
DAYS: tuple[Day, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- tools --------------------------------------------------------------------------------


class _ToolBase(_Section):
    name: str
    description: str = ""
    #: JSON Schema of the arguments (an object schema).
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    #: The parameter that names the operation (``kv``'s ``op``): policies match it as the
    #: call's *action*, and the generated stubs expose one method per value of its ``enum``.
    action: str | None = None
    timeout_s: float = Field(30.0, gt=0, le=3600)
    output_limit: int = Field(64 * 1024, ge=256, le=64 * 1024 * 1024)
    risk: Literal["low", "medium", "high"] = "low"
    #: Names of secrets (``secrets:`` section) given to this tool's execution.
    secrets: list[str] = Field(default_factory=list)
    #: False marks a write: never retried by the gateway.
    idempotent: bool = True

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not TOOL_NAME.match(value):
            raise ValueError("must be a lowercase identifier: [a-z][a-z0-9_]*, at most 63 chars")
        return value

    @model_validator(mode="after")
    def _action_is_a_parameter(self) -> _ToolBase:
        if self.parameters.get("type", "object") != "object":
            raise ValueError("parameters must be an object schema (type: object)")
        if self.action is not None and self.action not in self.parameters.get("properties", {}):
            raise ValueError(f"action '{self.action}' is not one of the parameters")
        return self


class ExecTool(_ToolBase):
    """A host executable. ``command`` is an argv; an element that is exactly ``{param}`` is
    replaced by that argument (never through a shell). The arguments also arrive as JSON on
    stdin; stdout (JSON if it parses) is the result; a non-zero exit fails with stderr."""

    kind: Literal["exec"]
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)


class HttpTool(_ToolBase):
    """A request template: ``{param}`` and ``{secrets.NAME}`` are filled into url, headers and
    body. The JSON response (or its text) is the result; a status >= 400 fails."""

    kind: Literal["http"]
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    #: A JSON body template; strings in it are filled like the url. None sends no body.
    body: Any = None


class PythonTool(_ToolBase):
    """An entry point ``package.module:function(arguments, context)``, sync or async."""

    kind: Literal["python"]
    entry: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class McpTool(_ToolBase):
    """Every tool of an MCP server, each imported as ``<name>_<tool>`` with its own schema."""

    kind: Literal["mcp"]
    transport: Literal["stdio", "http"] = "stdio"
    #: stdio: the server's argv.
    command: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    #: http: the streamable-HTTP endpoint.
    url: str = ""

    @model_validator(mode="after")
    def _transport_target(self) -> McpTool:
        if self.transport == "stdio" and not self.command:
            raise ValueError("an stdio MCP server needs a command")
        if self.transport == "http" and not self.url:
            raise ValueError("an http MCP server needs a url")
        return self


class BuiltinTool(_ToolBase):
    """A tool shipped with Sandgate (``kv``, ``http_fetch``); its schema is the tool's own."""

    kind: Literal["builtin"]
    #: http_fetch: the only domains it may reach (exact names or ``*.example.com``).
    allow_domains: list[str] = Field(default_factory=list)


ToolConfig = Annotated[
    ExecTool | HttpTool | PythonTool | McpTool | BuiltinTool, Field(discriminator="kind")
]


# -- policy -------------------------------------------------------------------------------


class SubjectMatch(_Section):
    """Who a rule is about. Every field given must match; a list means any of."""

    team: list[str] | None = None
    api_key: list[str] | None = None
    agent: list[str] | None = None
    sandbox: list[str] | None = None
    #: Sandbox metadata that must be present with these (glob) values.
    metadata: dict[str, str] = Field(default_factory=dict)

    @field_validator("team", "api_key", "agent", "sandbox", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class ArgCondition(_Section):
    """A condition on one argument; all the given checks must hold."""

    equals: Any = None
    glob: str | None = None
    regex: str | None = None
    min: float | None = None
    max: float | None = None
    one_of: list[Any] | None = None

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class TimeWindow(_Section):
    days: list[Day] = Field(default_factory=lambda: list(DAYS))
    start: str = "00:00"
    end: str = "24:00"
    #: An IANA zone name.
    tz: str = "UTC"

    @field_validator("start", "end")
    @classmethod
    def _hhmm(cls, value: str) -> str:
        if value != "24:00" and not _HHMM.match(value):
            raise ValueError("must be HH:MM (24-hour)")
        return value


class RateLimit(_Section):
    calls: int = Field(ge=1)
    window_s: float = Field(gt=0)
    #: Whose calls share the count: each sandbox, each agent, or each team.
    per: Literal["sandbox", "agent", "team"] = "sandbox"


class PolicyRule(_Section):
    id: str = Field(min_length=1, max_length=100)
    effect: Literal["allow", "deny", "ask"]
    subject: SubjectMatch = SubjectMatch()
    #: Tool name globs (canonical names). Empty or absent means every tool.
    tool: list[str] = Field(default_factory=lambda: ["*"])
    #: Action globs (the value of the tool's action parameter).
    action: list[str] | None = None
    args: dict[str, ArgCondition] = Field(default_factory=dict)
    time: TimeWindow | None = None
    rate_limit: RateLimit | None = None
    #: An ``allow`` of a ``risk: high`` tool still asks a person unless this is true.
    allow_high_risk: bool = False
    #: For ``ask``: how long this rule's approvals wait (default ``approvals.timeout_s``).
    approval_timeout_s: float | None = Field(None, gt=0)

    @field_validator("tool", "action", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class PolicyConfig(_Section):
    """Ordered rules; the first that matches decides; nothing matching means deny."""

    rules: list[PolicyRule] = Field(default_factory=list)
    #: Tool calls one sandbox may make in its life; None means unlimited.
    budget_per_sandbox: int | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _unique_ids(self) -> PolicyConfig:
        seen: set[str] = set()
        for rule in self.rules:
            if rule.id in seen:
                raise ValueError(f"rule id '{rule.id}' is used twice")
            seen.add(rule.id)
        return self


# -- the rest -----------------------------------------------------------------------------


class ApprovalsConfig(_Section):
    #: A call waiting longer than this is denied (never approved by default).
    timeout_s: float = Field(300.0, gt=0)
    #: Notified (POST, JSON) of every new pending approval; empty for none.
    webhook_url: str = ""


class SecretSource(_Section):
    """Where the gateway reads a secret: one of its environment variables, or a file."""

    env: str | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretSource:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env or file")
        return self


class AuditConfig(_Section):
    #: fsync after every record (the default) or leave flushing to the OS.
    fsync: bool = True


class AgentConfig(_Section):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
    metadata: dict[str, str] = Field(default_factory=dict)
    #: Teams whose sandboxes may act as this agent; empty means any team.
    teams: list[str] = Field(default_factory=list)


def check_gateway_references(tools: list[Any], secrets: dict[str, SecretSource]) -> None:
    """Cross-section checks: unique tool names, and secrets a tool names must be declared."""
    names: set[str] = set()
    for tool in tools:
        if tool.name in names:
            raise ValueError(f"tool name '{tool.name}' is declared twice")
        names.add(tool.name)
        for secret in tool.secrets:
            if secret not in secrets:
                raise ValueError(f"tool '{tool.name}' needs secret '{secret}', not in secrets")
