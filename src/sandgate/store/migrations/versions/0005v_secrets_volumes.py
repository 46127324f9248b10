"""team secrets, volumes, and the volumes a sandbox mounts

Revision ID: 0005v
Revises: 0005t
"""

import sqlalchemy as sa
from alembic import op

revision = "0005v"
down_revision = "0005t"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "team_secrets",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("team_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("current_version", sa.Integer(), nullable=False),
        sa.Column("metadata", sa.JSON(), nullable=False),
        sa.Column("ciphertext", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("team_id", "name", name="uq_team_secrets_name"),
    )
    op.create_table(
        "volumes",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("team_id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("size_mib", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("team_id", "name", name="uq_volumes_name"),
    )
    with op.batch_alter_table("sandboxes") as batch:
        batch.add_column(sa.Column("volume_mounts", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sandboxes") as batch:
        batch.drop_column("volume_mounts")
    op.drop_table("volumes")
    op.drop_table("team_secrets")
