"""Workflows: durable DAGs of tool calls, sandbox code, agent runs, approvals and child
workflows, run on DBOS Transact (docs/workflows.md).

Layout: ``expressions.py`` (references and ``when:``), ``graph.py`` (the DAG and its load-time
checks), ``state.py`` (run and step states), ``metadata.py`` (the reserved metadata keys),
``steps.py`` (what each step kind does), ``engine.py`` (the DBOS workflows: scheduler and
steps), ``service.py`` (definitions, runs, events), ``runtime.py`` (DBOS's start, schedules and
stop in a server process).

This module imports only the light parts (the config's validation uses ``graph``); the server
imports ``runtime`` and ``service``, which bring in DBOS.
"""

from sandgate.workflows.graph import Graph, GraphError, compile_graph
from sandgate.workflows.metadata import (
    RESERVED_PREFIX,
    RUN_METADATA_KEY,
    STEP_METADATA_KEY,
    WORKFLOW_METADATA_KEY,
)
from sandgate.workflows.state import FINAL_RUN_STATES, RunState, StepState

__all__ = [
    "FINAL_RUN_STATES",
    "RESERVED_PREFIX",
    "RUN_METADATA_KEY",
    "STEP_METADATA_KEY",
    "WORKFLOW_METADATA_KEY",
    "Graph",
    "GraphError",
    "RunState",
    "StepState",
    "compile_graph",
]
