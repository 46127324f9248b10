"""Who is calling: the identity a policy decides about."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sandgate.workflows.metadata import (
    RUN_METADATA_KEY,
    STEP_METADATA_KEY,
    WORKFLOW_METADATA_KEY,
)


@dataclass(frozen=True)
class Subject:
    """The caller of a tool call, as the gateway established it.

    SECURITY: every field comes from the store row of the sandbox whose socket the call
    arrived on (and the agent declared in config), never from the call's payload; so code in a
    sandbox cannot claim another team, key or agent.
    """

    sandbox_id: str
    team_id: str
    api_key_id: str | None = None
    agent: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "sandbox": self.sandbox_id,
            "team": self.team_id,
            "api_key": self.api_key_id,
            "agent": self.agent,
        }
        run = self.metadata.get(RUN_METADATA_KEY)
        if run is not None:
            # Set only by the workflows service (the E2B API refuses these keys), so audit
            # records can name the workflow, run and step a call belongs to.
            data["workflow"] = {
                "name": self.metadata.get(WORKFLOW_METADATA_KEY),
                "run": run,
                "step": self.metadata.get(STEP_METADATA_KEY),
            }
        return data
