"""The sandbox and subject metadata keys that name a workflow run and step.

Reserved: only the workflows service sets them (the E2B API refuses them in a create), so an
audit record or a policy rule that reads them can trust them.
"""

__all__ = ["RESERVED_PREFIX", "RUN_METADATA_KEY", "STEP_METADATA_KEY", "WORKFLOW_METADATA_KEY"]

WORKFLOW_METADATA_KEY = "sandgate.workflow"
RUN_METADATA_KEY = "sandgate.workflow_run"
STEP_METADATA_KEY = "sandgate.workflow_step"
#: Every reserved key starts with this.
RESERVED_PREFIX = "sandgate.workflow"
