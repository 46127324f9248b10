"""sandbox metrics samples and sandbox log entries (E2B metrics and logs endpoints)

Revision ID: 0007m
Revises: 0006w
"""

import sqlalchemy as sa
from alembic import op

revision = "0007m"
down_revision = "0006w"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sandbox_metrics",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("sandbox_id", sa.String(length=64), nullable=False),
        sa.Column("time_ms", sa.BigInteger(), nullable=False),
        sa.Column("cpu_count", sa.Integer(), nullable=False),
        sa.Column("cpu_used_pct", sa.Float(), nullable=False),
        sa.Column("mem_used", sa.BigInteger(), nullable=False),
        sa.Column("mem_total", sa.BigInteger(), nullable=False),
        sa.Column("mem_cache", sa.BigInteger(), nullable=False),
        sa.Column("disk_used", sa.BigInteger(), nullable=False),
        sa.Column("disk_total", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_sandbox_metrics_sandbox_time", "sandbox_metrics", ["sandbox_id", "time_ms"])
    op.create_table(
        "sandbox_log_entries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("sandbox_id", sa.String(length=64), nullable=False),
        sa.Column("time_ms", sa.BigInteger(), nullable=False),
        sa.Column("level", sa.String(length=8), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("fields", sa.JSON(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("guest_seq", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_sandbox_log_entries_sandbox_time",
        "sandbox_log_entries",
        ["sandbox_id", "time_ms"],
    )
    op.create_index(
        "ix_sandbox_log_entries_sandbox_seq",
        "sandbox_log_entries",
        ["sandbox_id", "guest_seq"],
    )


def downgrade() -> None:
    op.drop_index("ix_sandbox_log_entries_sandbox_seq", table_name="sandbox_log_entries")
    op.drop_index("ix_sandbox_log_entries_sandbox_time", table_name="sandbox_log_entries")
    op.drop_table("sandbox_log_entries")
    op.drop_index("ix_sandbox_metrics_sandbox_time", table_name="sandbox_metrics")
    op.drop_table("sandbox_metrics")
