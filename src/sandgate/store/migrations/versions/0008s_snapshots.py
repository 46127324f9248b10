"""snapshots, sandboxes paused to disk, and sandbox lifecycle (on_timeout, auto_resume)

Revision ID: 0008s
Revises: 0007m
"""

import sqlalchemy as sa
from alembic import op

revision = "0008s"
down_revision = "0007m"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("image_ref", sa.String(length=500), nullable=True))
        batch.add_column(sa.Column("timeout_s", sa.Integer(), nullable=True))
        batch.add_column(
            sa.Column("on_timeout", sa.String(length=8), nullable=False, server_default="kill")
        )
        batch.add_column(
            sa.Column("auto_pause_memory", sa.Boolean(), nullable=False, server_default=sa.true())
        )
        batch.add_column(
            sa.Column("auto_resume", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.create_table(
        "snapshots",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("team_id", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("tag", sa.String(length=100), nullable=True),
        sa.Column("source_sandbox_id", sa.String(length=64), nullable=False),
        sa.Column("template_id", sa.String(length=64), nullable=False),
        sa.Column("image_ref", sa.String(length=500), nullable=False),
        sa.Column("cpu_count", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.Integer(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_snapshots_team_kind", "snapshots", ["team_id", "kind"])
    op.create_index("ix_snapshots_source", "snapshots", ["source_sandbox_id"])


def downgrade() -> None:
    op.drop_index("ix_snapshots_source", table_name="snapshots")
    op.drop_index("ix_snapshots_team_kind", table_name="snapshots")
    op.drop_table("snapshots")
    with op.batch_alter_table("sandboxes") as batch:
        for column in ("auto_resume", "auto_pause_memory", "on_timeout", "timeout_s", "image_ref"):
            batch.drop_column(column)
