"""chat channels: the read position of each channel and each chat's agent session

Revision ID: 0009c
Revises: 0008s
"""

import sqlalchemy as sa
from alembic import op

revision = "0009c"
down_revision = "0008s"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "channel_cursors",
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("channel"),
    )
    op.create_table(
        "channel_chats",
        sa.Column("channel", sa.String(length=100), nullable=False),
        sa.Column("chat_id", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.String(length=100), nullable=False),
        sa.Column("session_id", sa.String(length=64), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("channel", "chat_id"),
    )


def downgrade() -> None:
    op.drop_table("channel_chats")
    op.drop_table("channel_cursors")
