"""``workflow_run``: start a workflow from a tool call (an agent's code, a workflow step).

The run belongs to the caller's team and key and is started exactly as through the API
(``POST /v1/workflows/{name}/runs``): the inputs are checked against the workflow's schema,
and the workflow's steps then act as the workflow says (its own ``agent``), not as the
caller. ``wait_s`` > 0 waits that long for the run to end and returns its output. Which
agents may start which workflows is the policy's business: conditions on ``workflow`` select
them. Not idempotent: each call starts a run.
"""

from __future__ import annotations

from typing import Any, Protocol

from sandgate.errors import ToolFailed
from sandgate.policy import Subject
from sandgate.tools.tool import ToolContext

DESCRIPTION = "Start a Sandgate workflow by name with inputs; optionally wait for its output."
ACTION = None
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "workflow": {"type": "string", "description": "The workflow's name.", "maxLength": 63},
        "inputs": {"type": "object", "description": "The run's inputs.", "default": {}},
        "wait_s": {
            "type": "number",
            "minimum": 0,
            "maximum": 3600,
            "default": 0,
            "description": "Seconds to wait for the run to end (0: return at once).",
        },
    },
    "required": ["workflow"],
    "additionalProperties": False,
}
IDEMPOTENT = False


class WorkflowStarter(Protocol):
    async def start_for_tool(
        self, subject: Subject, name: str, inputs: dict[str, Any], wait_s: float
    ) -> dict[str, Any]: ...


class WorkflowRunExecutor:
    """Bound to the server's workflows service once it runs (``bind``)."""

    def __init__(self) -> None:
        self._starter: WorkflowStarter | None = None

    def bind(self, starter: WorkflowStarter | None) -> None:
        self._starter = starter

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> Any:
        if self._starter is None:
            raise ToolFailed("workflow_run: workflows do not run in this process (sandgate serve)")
        return await self._starter.start_for_tool(
            context.subject,
            arguments["workflow"],
            dict(arguments.get("inputs") or {}),
            float(arguments.get("wait_s") or 0),
        )
