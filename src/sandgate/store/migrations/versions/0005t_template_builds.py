"""team templates, their builds, build logs and tags

Revision ID: 0005t
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005t"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("templates") as batch:
        batch.add_column(sa.Column("team_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("alias", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("ready_cmd", sa.Text(), nullable=True))
        batch.add_column(sa.Column("default_user", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("default_workdir", sa.String(length=1000), nullable=True))
        batch.add_column(sa.Column("envs", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("build_id", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("spawn_count", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("last_spawned_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "template_builds",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("template_id", sa.String(length=64), nullable=False),
        sa.Column("team_id", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("cpu_count", sa.Integer(), nullable=False),
        sa.Column("memory_mb", sa.Integer(), nullable=False),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=True),
        sa.Column("engine", sa.String(length=16), nullable=True),
        sa.Column("image_ref", sa.String(length=500), nullable=True),
        sa.Column("image_id", sa.String(length=200), nullable=True),
        sa.Column("start_cmd", sa.Text(), nullable=True),
        sa.Column("ready_cmd", sa.Text(), nullable=True),
        sa.Column("default_user", sa.String(length=64), nullable=True),
        sa.Column("default_workdir", sa.String(length=1000), nullable=True),
        sa.Column("envs", sa.JSON(), nullable=True),
        sa.Column("cached_steps", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("total_steps", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("reason_step", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_template_builds_template", "template_builds", ["template_id", "created_at"])
    op.create_table(
        "template_build_logs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("build_id", sa.String(length=64), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("level", sa.String(length=8), nullable=False),
        sa.Column("step", sa.String(length=32), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_template_build_logs_build", "template_build_logs", ["build_id", "seq"], unique=True
    )
    op.create_table(
        "template_tags",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("template_id", sa.String(length=64), nullable=False),
        sa.Column("tag", sa.String(length=128), nullable=False),
        sa.Column("build_id", sa.String(length=64), nullable=False),
        sa.Column("assigned_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("removed_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_template_tags_template_tag", "template_tags", ["template_id", "tag"])


def downgrade() -> None:
    op.drop_index("ix_template_tags_template_tag", table_name="template_tags")
    op.drop_table("template_tags")
    op.drop_index("ix_template_build_logs_build", table_name="template_build_logs")
    op.drop_table("template_build_logs")
    op.drop_index("ix_template_builds_template", table_name="template_builds")
    op.drop_table("template_builds")
    with op.batch_alter_table("templates") as batch:
        for column in (
            "last_spawned_at",
            "spawn_count",
            "build_id",
            "envs",
            "default_workdir",
            "default_user",
            "ready_cmd",
            "alias",
            "team_id",
        ):
            batch.drop_column(column)
