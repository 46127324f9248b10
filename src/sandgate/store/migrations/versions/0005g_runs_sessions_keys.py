"""runs are manageable (their sandbox, cancel requests), ephemeral sessions, scoped API keys

Revision ID: 0005g
Revises: 0005v
"""

import sqlalchemy as sa
from alembic import op

revision = "0005g"
down_revision = "0005v"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_runs") as batch:
        batch.add_column(sa.Column("sandbox_id", sa.String(length=64), nullable=True))
        batch.add_column(
            sa.Column("cancel_requested_at", sa.DateTime(timezone=True), nullable=True)
        )
        batch.add_column(sa.Column("cancelled_by", sa.String(length=200), nullable=True))
        batch.create_index("ix_agent_runs_team_created", ["team_id", "created_at"])
    with op.batch_alter_table("agent_sessions") as batch:
        batch.add_column(
            sa.Column("ephemeral", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("scopes", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("scopes")
    with op.batch_alter_table("agent_sessions") as batch:
        batch.drop_column("ephemeral")
    with op.batch_alter_table("agent_runs") as batch:
        batch.drop_index("ix_agent_runs_team_created")
        batch.drop_column("cancelled_by")
        batch.drop_column("cancel_requested_at")
        batch.drop_column("sandbox_id")
