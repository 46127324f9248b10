"""sandbox_metrics, sandbox_log_entries: an index on time_ms for the retention prunes

Each table is pruned by age every minute (``time_ms < cutoff``), and each was indexed only by
sandbox first, so every prune read the whole table, holding the database's write lock while it
did (SQLite takes it when a DELETE starts): at 500 running sandboxes a day of metric samples is
8.6 million rows, and every create, kill and audit record waited for the scan.

Revision ID: 0011t
Revises: 0010i
"""

from alembic import op

revision = "0011t"
down_revision = "0010i"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_sandbox_metrics_time", "sandbox_metrics", ["time_ms"])
    op.create_index("ix_sandbox_log_entries_time", "sandbox_log_entries", ["time_ms"])


def downgrade() -> None:
    op.drop_index("ix_sandbox_log_entries_time", table_name="sandbox_log_entries")
    op.drop_index("ix_sandbox_metrics_time", table_name="sandbox_metrics")
