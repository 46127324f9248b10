"""Configuration of the tool gateway: tools, policy, approvals, secrets, audit and agents.

Kept beside ``_model.py`` so the sandbox settings and the gateway settings each read on one
screen; ``Config`` includes these sections. Like every section they are frozen and reject
unknown keys, so a typo in a policy rule is a start-up error naming its path
(``policy.rules.2.efect``), never a silently ignored condition.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Tool names: lowercase identifiers, so they are commands, Python attributes and JS keys.
TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_HHMM = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")
Day = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
DAYS: tuple[Day, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- tools --------------------------------------------------------------------------------


class RetryConfig(_Section):
    """Retries of a failed call (``tool_failed``, ``tool_timeout``) of an idempotent tool:
    ``attempts`` in all, waiting ``backoff_s`` before the second, doubling up to
    ``max_backoff_s``. Never for a tool marked ``idempotent: false``."""

    attempts: int = Field(3, ge=2, le=10)
    backoff_s: float = Field(0.5, ge=0, le=60)
    max_backoff_s: float = Field(10.0, ge=0, le=600)


class OutputConfig(_Section):
    """What of a tool's result reaches the caller (after redaction, which always applies).

    ``full``: the result. ``fields``: only these top-level keys of an object result (anything
    else, and any non-object result, is dropped). ``none``: never the result, only whether the
    call succeeded: the "never return secrets" mode for tools that use a secret and whose
    output could carry it in a form redaction cannot recognise (reversed, encoded, a prefix).
    In ``fields`` and ``none`` modes a failure's message is withheld too.
    """

    mode: Literal["full", "fields", "none"] = "full"
    fields: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _fields_given(self) -> OutputConfig:
        if self.mode == "fields" and not self.fields:
            raise ValueError("mode fields needs the fields to keep (fields: [id, status])")
        if self.mode != "fields" and self.fields:
            raise ValueError("fields are only used with mode: fields")
        return self


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
    #: Retry failed calls (idempotent tools only); None: one attempt.
    retry: RetryConfig | None = None
    #: What of the result the caller gets (``full``, ``fields``, ``none``).
    output: OutputConfig = OutputConfig()

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not TOOL_NAME.match(value):
            raise ValueError("must be a lowercase identifier: [a-z][a-z0-9_]*, at most 63 chars")
        return value

    @model_validator(mode="after")
    def _retries_only_when_idempotent(self) -> _ToolBase:
        if self.retry is not None and not self.idempotent:
            raise ValueError(
                "retry needs an idempotent tool: a call marked idempotent: false is a write "
                "and never runs twice (remove retry, or mark the tool idempotent: true)"
            )
        return self

    @model_validator(mode="after")
    def _action_is_a_parameter(self) -> _ToolBase:
        if self.parameters.get("type", "object") != "object":
            raise ValueError("parameters must be an object schema (type: object)")
        # Imported here: the tools package builds on this configuration.
        from sandgate.tools.validation import schema_problem

        problem = schema_problem(self.parameters)
        if problem is not None:
            raise ValueError(f"parameters is not a JSON Schema (2020-12): {problem}")
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
    """Who a rule is about. Every field given must match; a list means any of (globs)."""

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

    @field_validator("team", "api_key", "agent", "sandbox")
    @classmethod
    def _not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("an empty list matches nobody; leave the key out to match anyone")
        return value


class ArgCondition(_Section):
    """A condition on one argument; every check given must hold (docs/tools.md lists them).

    ``glob``, ``matches`` and ``full_match`` hold only for strings; ``min``/``max`` only for
    numbers; ``equals``/``one_of`` compare JSON values. The patterns are checked (and later
    compiled) by ``PolicyRule``, so an error names the rule.
    """

    equals: Any = None
    one_of: list[Any] | None = Field(None, min_length=1)
    glob: str | None = None
    #: RE2 search: the pattern occurs anywhere in the value.
    matches: str | None = None
    #: RE2 full match: the pattern covers the whole value.
    full_match: str | None = None
    min: float | None = None
    max: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _regex_is_gone(cls, data: Any) -> Any:
        if isinstance(data, dict) and "regex" in data:
            raise ValueError(
                "'regex' is no longer an operator: it meant a full match of the whole value, "
                "so write full_match: '<pattern>' for that, or matches: '<pattern>' to find "
                "the pattern anywhere in the value (both RE2 syntax)"
            )
        return data

    @property
    def has_equals(self) -> bool:
        """``equals`` was given (``equals: null`` asks for a null value)."""
        return "equals" in self.model_fields_set

    def patterns(self) -> list[tuple[Literal["glob", "matches", "full_match"], str]]:
        """The pattern operators given, as (operator, source)."""
        given: list[tuple[Literal["glob", "matches", "full_match"], str | None]] = [
            ("glob", self.glob),
            ("matches", self.matches),
            ("full_match", self.full_match),
        ]
        return [(op, source) for op, source in given if source is not None]


class TimeWindow(_Section):
    """Days and a time of day, ``start`` inclusive, ``end`` exclusive, in ``tz``."""

    days: list[Day] = Field(default_factory=lambda: list(DAYS), min_length=1)
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

    @field_validator("tz")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"'{value}' is not an IANA time zone (e.g. Europe/Paris)") from None
        return value

    @property
    def start_minute(self) -> int:
        """``start`` as minutes since midnight."""
        return _minutes(self.start)

    @property
    def end_minute(self) -> int:
        """``end`` as minutes since midnight (``24:00`` is 1440)."""
        return _minutes(self.end)

    @model_validator(mode="after")
    def _start_before_end(self) -> TimeWindow:
        if self.start_minute >= self.end_minute:
            raise ValueError(
                f"start {self.start} is not before end {self.end}; a window across midnight "
                "is two rules (e.g. 22:00-24:00 and 00:00-06:00)"
            )
        return self


def _minutes(hhmm: str) -> int:
    hours, mins = hhmm.split(":")
    return int(hours) * 60 + int(mins)


class RateLimit(_Section):
    calls: int = Field(ge=1)
    window_s: float = Field(gt=0)
    #: Whose calls share the count: each sandbox, each agent, or each team.
    per: Literal["sandbox", "agent", "team"] = "sandbox"


class PolicyRule(_Section):
    id: str = Field(min_length=1, max_length=100)
    effect: Literal["allow", "deny", "ask"]
    subject: SubjectMatch = SubjectMatch()
    #: Tool name globs (canonical names). Absent means every tool.
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

    @field_validator("tool", "action")
    @classmethod
    def _not_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value:
            raise ValueError("an empty list matches nothing; leave the key out to match any")
        return value

    @model_validator(mode="after")
    def _patterns_compile(self) -> PolicyRule:
        """Every glob and RE2 pattern compiles within its bounds; errors name the rule."""
        # Imported here: sandgate.policy imports this module's models.
        from sandgate.policy.patterns import PatternError, compile_pattern

        for where, operator, source in self.pattern_sources():
            try:
                compile_pattern(operator, source)
            except PatternError as exc:
                raise ValueError(f"rule '{self.id}': {where}: {exc}") from None
        return self

    def pattern_sources(
        self,
    ) -> list[tuple[str, Literal["glob", "matches", "full_match"], str]]:
        """Every pattern of the rule as (where, operator, source)."""
        found: list[tuple[str, Literal["glob", "matches", "full_match"], str]] = []
        subject = self.subject
        for name in ("team", "api_key", "agent", "sandbox"):
            for glob in getattr(subject, name) or []:
                found.append((f"subject.{name}", "glob", glob))
        for key, glob in subject.metadata.items():
            found.append((f"subject.metadata.{key}", "glob", glob))
        found += [("tool", "glob", glob) for glob in self.tool]
        found += [("action", "glob", glob) for glob in self.action or []]
        for arg, condition in self.args.items():
            for operator, source in condition.patterns():
                found.append((f"args.{arg}.{operator}", operator, source))
        return found


class PolicyConfig(_Section):
    """Rules with deny-overrides semantics: among the rules matching a call any ``deny``
    wins, then any ``ask``, then any ``allow``; nothing matching means deny. Order only
    picks which rule of the winning effect decides (the first), for its id and options."""

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
    #: Notified (POST, JSON) when an approval is requested, decided and expires; empty: none.
    webhook_url: str = ""
    #: A secret (``secrets:``) whose value signs each notification (HMAC-SHA256 over
    #: ``<timestamp>.<body>``); without it notifications go unsigned.
    webhook_secret: str | None = None


class SecretSource(_Section):
    """Where the gateway reads a secret: one of its environment variables, or a file."""

    env: str | None = None
    file: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretSource:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env or file")
        return self


class AuditCheckpoint(_Section):
    """A signed copy of the log's head kept outside the home (``audit/checkpoint.py``)."""

    #: A file on other storage than ``$SANDGATE_HOME`` (another volume, an append-only mount).
    path: str = Field(min_length=1)
    #: The secret (``secrets:``) whose value keys the HMAC; keep it out of the home too.
    key_secret: str
    every_records: int = Field(1000, ge=1)
    every_s: float = Field(60.0, gt=0)


class AuditConfig(_Section):
    #: fsync every batch of records (the default) or leave flushing to the OS.
    fsync: bool = True
    #: Optional external anchor: periodic signed checkpoints of the head.
    checkpoint: AuditCheckpoint | None = None


class AgentConfig(_Section):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
    metadata: dict[str, str] = Field(default_factory=dict)
    #: Teams whose sandboxes may act as this agent; empty means any team.
    teams: list[str] = Field(default_factory=list)


def check_gateway_references(
    tools: list[Any],
    secrets: dict[str, SecretSource],
    audit: AuditConfig | None = None,
    approvals: ApprovalsConfig | None = None,
) -> None:
    """Cross-section checks: unique tool names, and secrets a tool, the audit checkpoint or
    the approval webhook names must be declared."""
    webhook_secret = approvals.webhook_secret if approvals is not None else None
    if webhook_secret is not None and webhook_secret not in secrets:
        raise ValueError(
            f"approvals.webhook_secret names '{webhook_secret}', which is not declared in secrets:"
        )
    checkpoint = audit.checkpoint if audit is not None else None
    if checkpoint is not None and checkpoint.key_secret not in secrets:
        raise ValueError(
            f"audit.checkpoint.key_secret names '{checkpoint.key_secret}', which is not "
            "declared in secrets:"
        )
    names: set[str] = set()
    for tool in tools:
        if tool.name in names:
            raise ValueError(f"tool name '{tool.name}' is declared twice")
        names.add(tool.name)
        for secret in tool.secrets:
            if secret not in secrets:
                raise ValueError(f"tool '{tool.name}' needs secret '{secret}', not in secrets")
