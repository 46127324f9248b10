"""sandboxes, audit_entries, agent_runs: indexes for the queries that read a history

A team's metrics (``/teams/{id}/metrics``) read the sandboxes alive in a time window, and the
only index that fit was ``(team_id, state)``: each call read every sandbox the team ever had.
A team's audit rows (the console's search, newest first; ``/v1/audit`` from a sequence number
on) had no index by team at all: each query walked every team's records in sequence order.
The agent runner's start looks for runs left active among every run ever made, by state alone.

Revision ID: 0012h
Revises: 0011t
"""

from alembic import op

revision = "0012h"
down_revision = "0011t"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_sandboxes_team_ended", "sandboxes", ["team_id", "ended_at"])
    op.create_index("ix_audit_team_seq", "audit_entries", ["team_id", "seq"])
    op.create_index("ix_agent_runs_state", "agent_runs", ["state"])


def downgrade() -> None:
    op.drop_index("ix_agent_runs_state", table_name="agent_runs")
    op.drop_index("ix_audit_team_seq", table_name="audit_entries")
    op.drop_index("ix_sandboxes_team_ended", table_name="sandboxes")
