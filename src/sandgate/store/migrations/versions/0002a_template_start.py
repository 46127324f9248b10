"""template start command and ready port

Revision ID: 0002a
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002a"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("templates") as batch:
        batch.add_column(sa.Column("start_cmd", sa.Text(), nullable=True))
        batch.add_column(sa.Column("ready_port", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("templates") as batch:
        batch.drop_column("ready_port")
        batch.drop_column("start_cmd")
