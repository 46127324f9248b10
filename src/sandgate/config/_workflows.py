"""Configuration of workflows: durable DAGs of tool, code, agent, approval and child-workflow
steps (``sandgate.workflows`` runs them; docs/workflows.md describes the model).

The same models validate a workflow from the config file, from a file under
``workflows.paths`` and from the HTTP API. Everything that can be checked without running the
workflow is checked here, with the step named: unknown steps in ``depends_on``, cycles,
references to steps or inputs that do not exist, ``${item}`` outside a ``for_each`` step,
unparsable ``when:`` conditions, ``retries`` on a step that is not idempotent. Checks that
need the rest of the config (the tool exists, is it idempotent, the agent exists) are made by
``check_workflow_references``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Workflow and step names: lowercase identifiers (they appear in URLs, ids and audit).
NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_CRON_FIELDS = (5, 6)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _StepBase(_Section):
    id: str
    description: str = ""
    #: Steps that must be done first, besides those this step's references read.
    depends_on: list[str] = Field(default_factory=list)
    #: A condition (docs/workflows.md); false skips the step (its output is null).
    when: str | None = None
    #: A reference to a list; the step runs once per element (``${item}``, ``${index}``).
    for_each: str | None = None
    #: Elements of ``for_each`` running at once.
    concurrency: int = Field(4, ge=1, le=100)
    #: Longest one attempt may run (approval: how long a person has to decide).
    timeout_s: float | None = Field(None, gt=0, le=30 * 86400)
    #: Further attempts after a failure, only for idempotent steps.
    retries: int = Field(0, ge=0, le=20)
    #: Wait before the first retry; doubled before each next one.
    backoff_s: float = Field(1.0, ge=0, le=3600)

    @field_validator("id")
    @classmethod
    def _valid_id(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError("must be a lowercase identifier: [a-z][a-z0-9_]*, at most 63 chars")
        return value

    @property
    def idempotent(self) -> bool:
        """Whether running this step twice does no harm (only then is it retried). Tool steps
        depend on the tool (``check_workflow_references`` fills that in)."""
        return False


class ToolStep(_StepBase):
    """Calls one gateway tool: policy, approvals, secrets and audit apply as to any call."""

    kind: Literal["tool"]
    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    #: The agent the call is made as (policy subject); default: the workflow's ``agent``.
    agent: str | None = None
    #: Set from the tool's own ``idempotent`` when the workflow is checked against the tools.
    tool_idempotent: bool = False

    @property
    def idempotent(self) -> bool:
        return self.tool_idempotent


class CodeStep(_StepBase):
    """Runs a script in a new sandbox of ``template``, with the tools ``agent`` may use."""

    kind: Literal["code"]
    code: str = Field(min_length=1, max_length=1_000_000)
    language: Literal["python", "bash"] = "python"
    template: str = "base"
    #: JSON given to the script in the file named by ``$SANDGATE_STEP_INPUT``.
    inputs: dict[str, Any] = Field(default_factory=dict)
    #: The agent the sandbox acts as (its tool calls' policy subject); default: the
    #: workflow's ``agent``.
    agent: str | None = None
    #: True only when running the script twice does no harm (then ``retries`` may be set).
    idempotent_code: bool = Field(False, alias="idempotent")
    #: Characters of stdout and of stderr kept (the tail).
    output_limit: int = Field(8000, ge=200, le=1_000_000)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @property
    def idempotent(self) -> bool:
        return self.idempotent_code


class AgentStep(_StepBase):
    """A run of a configured agent with ``message``; its output is the answer."""

    kind: Literal["agent"]
    agent: str
    message: str = Field(min_length=1, max_length=200_000)


class ApprovalStep(_StepBase):
    """A person decides (``sandgate approvals``, the HTTP API); silence until ``timeout_s``
    (default ``approvals.timeout_s``) denies."""

    kind: Literal["approval"]
    message: str = Field(min_length=1, max_length=10_000)
    #: Shown with the message (references allowed).
    details: Any = None
    #: ``fail``: a denial fails the run; ``continue``: the step completes with
    #: ``approved: false`` so later ``when:`` conditions can branch on it.
    on_deny: Literal["fail", "continue"] = "fail"


class ChildWorkflowStep(_StepBase):
    """Runs another workflow as a child run; its output is the child's output."""

    kind: Literal["workflow"]
    workflow: str
    inputs: dict[str, Any] = Field(default_factory=dict)


StepConfig = Annotated[
    ToolStep | CodeStep | AgentStep | ApprovalStep | ChildWorkflowStep,
    Field(discriminator="kind"),
]


class WorkflowBudgets(_Section):
    """Limits of one run, checked before each step starts; reaching one fails the run.
    ``max_tool_calls`` is also spent at each call a code step's script makes (docs/workflows.md,
    "what is checked when")."""

    #: Tool calls through the gateway: tool steps, calls made by code steps' scripts, and
    #: agent steps' runs.
    max_tool_calls: int | None = Field(None, ge=1)
    #: Model tokens spent by agent steps.
    max_tokens: int | None = Field(None, ge=1)


class WorkflowConfig(_Section):
    """One workflow: inputs (a JSON Schema), steps, an output."""

    name: str
    description: str = ""
    #: JSON Schema of the run's inputs (an object schema), checked when a run starts.
    inputs: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    steps: list[StepConfig] = Field(min_length=1, max_length=500)
    #: The run's output (references allowed); default: every step's output by step id.
    output: Any = None
    #: The agent tool and code steps act as, unless a step names its own.
    agent: str | None = None
    #: Steps (for_each elements included) running at once in one run.
    concurrency: int = Field(8, ge=1, le=256)
    #: Longest a run may take; then it stops as ``timed_out``.
    timeout_s: float = Field(86400.0, gt=0, le=366 * 86400)
    budgets: WorkflowBudgets = WorkflowBudgets()
    #: A cron expression (5 fields, or 6 with seconds first): a run starts at each time.
    schedule: str | None = None
    #: Timezone of ``schedule`` (IANA name).
    schedule_timezone: str = "UTC"
    #: Inputs of scheduled runs.
    schedule_inputs: dict[str, Any] = Field(default_factory=dict)
    #: The team (name) scheduled runs belong to.
    schedule_team: str = "default"

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not NAME.match(value):
            raise ValueError("must be a lowercase identifier: [a-z][a-z0-9_]*, at most 63 chars")
        return value

    @field_validator("schedule")
    @classmethod
    def _cron(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from croniter import croniter

        fields = len(value.split())
        if fields not in _CRON_FIELDS or not croniter.is_valid(
            value, second_at_beginning=fields == 6
        ):
            raise ValueError(f"'{value}' is not a cron expression (e.g. '0 6 * * *')")
        return value

    @model_validator(mode="after")
    def _graph(self) -> WorkflowConfig:
        # Imported here: sandgate.workflows imports this module's models.
        from sandgate.workflows.graph import GraphError, compile_graph

        if self.inputs.get("type", "object") != "object":
            raise ValueError("inputs must be an object schema (type: object)")
        try:
            compile_graph(self)
        except GraphError as exc:
            raise ValueError(str(exc)) from None
        return self


class WorkflowsConfig(_Section):
    """``workflows:``: definitions inline, files under ``paths``, and the engine's database.

    ``workflows:`` may also be written as a plain list of definitions."""

    definitions: list[WorkflowConfig] = Field(default_factory=list)
    #: Directories of ``*.yaml``/``*.yml`` files, one workflow per file.
    paths: list[str] = Field(default_factory=list)
    #: DBOS's system database (checkpoints of every run). Empty: SQLite under
    #: ``$SANDGATE_HOME/workflows/``, or the store's database when that is PostgreSQL.
    database_url: str = ""
    #: Workflows one team may define through the HTTP API.
    max_api_definitions_per_team: int = Field(100, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _list_form(cls, data: Any) -> Any:
        return {"definitions": data} if isinstance(data, list) else data

    @model_validator(mode="after")
    def _unique(self) -> WorkflowsConfig:
        seen: set[str] = set()
        for workflow in self.definitions:
            if workflow.name in seen:
                raise ValueError(f"workflow '{workflow.name}' is defined twice")
            seen.add(workflow.name)
        return self


def check_workflow_references(
    workflow: WorkflowConfig,
    tools: dict[str, bool],
    mcp_servers: set[str],
    agents: set[str],
) -> WorkflowConfig:
    """Checks ``workflow`` against the configured tools (name → idempotent), MCP servers and
    agents; returns it with each tool step's idempotence filled in. Raises ``ValueError``
    naming the workflow and step."""
    steps: list[Any] = []
    for step in workflow.steps:
        where = f"workflow '{workflow.name}': step '{step.id}'"
        agent = getattr(step, "agent", None) or (
            workflow.agent if isinstance(step, ToolStep | CodeStep) else None
        )
        if agent is not None and agent not in agents:
            raise ValueError(f"{where}: agent '{agent}' is not declared in agents:")
        if isinstance(step, ToolStep):
            if step.tool in tools:
                idempotent = tools[step.tool]
            elif any(step.tool.startswith(f"{server}_") for server in mcp_servers):
                idempotent = False  # an MCP tool's effects are unknown: treated as a write
            else:
                raise ValueError(f"{where}: there is no tool '{step.tool}' (see tools:)")
            step = step.model_copy(update={"tool_idempotent": idempotent})
        if step.retries and not step.idempotent:
            raise ValueError(
                f"{where}: retries need an idempotent step; {_why_not_idempotent(step)}"
            )
        steps.append(step)
    if workflow.agent is not None and workflow.agent not in agents:
        raise ValueError(
            f"workflow '{workflow.name}': agent '{workflow.agent}' is not declared in agents:"
        )
    return workflow.model_copy(update={"steps": steps})


def _why_not_idempotent(step: Any) -> str:
    if isinstance(step, ToolStep):
        return f"tool '{step.tool}' is not marked idempotent (a write is never run twice)"
    if isinstance(step, CodeStep):
        return "mark the code step idempotent: true if running it twice does no harm"
    article = "an" if step.kind[0] in "aeiou" else "a"
    return f"{article} {step.kind} step is never run twice"
