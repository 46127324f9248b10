"""Workflows: durable DAGs of tool calls, sandbox code, agent runs, approvals and child
workflows, run on DBOS Transact (docs/workflows.md).

Layout: ``expressions.py`` (references and ``when:``), ``graph.py`` (the DAG and its load-time
checks), ``state.py`` (run and step states), ``steps.py`` (what each step kind does),
``engine.py`` (the DBOS workflows: scheduler and steps), ``service.py`` (definitions, runs,
events), ``runtime.py`` (DBOS's start, schedules and stop in a server process).
"""

from sandgate.workflows.engine import PROCESS_NONCE, Engine
from sandgate.workflows.runtime import WorkflowRuntime, system_database_url
from sandgate.workflows.service import FINAL_EVENTS, Definition, WorkflowService
from sandgate.workflows.state import FINAL_RUN_STATES, RunState, StepState
from sandgate.workflows.steps import (
    RUN_METADATA_KEY,
    STEP_METADATA_KEY,
    WORKFLOW_METADATA_KEY,
    StepExecutors,
)

__all__ = [
    "FINAL_EVENTS",
    "FINAL_RUN_STATES",
    "PROCESS_NONCE",
    "RUN_METADATA_KEY",
    "STEP_METADATA_KEY",
    "WORKFLOW_METADATA_KEY",
    "Definition",
    "Engine",
    "RunState",
    "StepExecutors",
    "StepState",
    "WorkflowRuntime",
    "WorkflowService",
    "system_database_url",
]
