"""sandboxes: an index on (state, end_at) for the queries that look for live sandboxes

The table keeps every ended sandbox (team metrics are computed from its history), so a query
on ``state`` alone read all of it: the reaper's look for expired sandboxes (every second),
the live list of the metrics and log collectors (every few seconds) and the server-wide
quota count of every create grew with the number of sandboxes ever created.

Revision ID: 0010i
Revises: 0009c
"""

from alembic import op

revision = "0010i"
down_revision = "0009c"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_sandboxes_state_end", "sandboxes", ["state", "end_at"])


def downgrade() -> None:
    op.drop_index("ix_sandboxes_state_end", table_name="sandboxes")
