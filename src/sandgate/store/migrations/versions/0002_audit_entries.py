"""audit log index

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_entries",
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("sandbox_id", sa.String(length=64), nullable=True),
        sa.Column("team_id", sa.String(length=64), nullable=True),
        sa.Column("agent", sa.String(length=100), nullable=True),
        sa.Column("tool", sa.String(length=200), nullable=True),
        sa.Column("action", sa.String(length=200), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("rule_id", sa.String(length=100), nullable=True),
        sa.Column("duration_ms", sa.Float(), nullable=True),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("seq"),
    )
    op.create_index("ix_audit_tool_outcome", "audit_entries", ["tool", "outcome"])
    op.create_index("ix_audit_sandbox", "audit_entries", ["sandbox_id"])


def downgrade() -> None:
    op.drop_index("ix_audit_sandbox", table_name="audit_entries")
    op.drop_index("ix_audit_tool_outcome", table_name="audit_entries")
    op.drop_table("audit_entries")
