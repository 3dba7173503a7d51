"""data-triggered schedules (and the index their pass probes data_files with), and the
variables of a schedule's fire on its jobs and sweeps

Revision ID: 0028_data_triggers
Revises: 0027_webhooks
Create Date: 2026-11-29 15:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0028_data_triggers"
down_revision: str | Sequence[str] | None = "0027_webhooks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_MOMENT = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch_op:
        batch_op.add_column(sa.Column("covered_until", _MOMENT, nullable=True))
        batch_op.add_column(sa.Column("trigger_path", sa.String(length=1024), nullable=True))
        batch_op.add_column(
            sa.Column("trigger_settle_seconds", sa.Integer(), nullable=False, server_default="30")
        )
        batch_op.add_column(sa.Column("data_seen_at", _MOMENT, nullable=True))
        batch_op.add_column(sa.Column("data_version", sa.String(length=80), nullable=True))
        batch_op.add_column(sa.Column("data_version_at", _MOMENT, nullable=True))
    with op.batch_alter_table("schedule_runs") as batch_op:
        batch_op.add_column(sa.Column("data_version", sa.String(length=80), nullable=True))
        batch_op.create_unique_constraint("uq_schedule_runs_data", ["schedule_id", "data_version"])
    op.create_index("ix_data_files_changes", "data_files", ["project_id", "updated_at"])
    for table in ("jobs", "sweeps"):
        with op.batch_alter_table(table) as batch_op:
            batch_op.add_column(sa.Column("schedule_env", sa.JSON(), nullable=True))


def downgrade() -> None:
    for table in ("sweeps", "jobs"):
        with op.batch_alter_table(table) as batch_op:
            batch_op.drop_column("schedule_env")
    op.drop_index("ix_data_files_changes", table_name="data_files")
    with op.batch_alter_table("schedule_runs") as batch_op:
        batch_op.drop_constraint("uq_schedule_runs_data", type_="unique")
        batch_op.drop_column("data_version")
    with op.batch_alter_table("schedules") as batch_op:
        for column in (
            "data_version_at",
            "data_version",
            "data_seen_at",
            "trigger_settle_seconds",
            "trigger_path",
            "covered_until",
        ):
            batch_op.drop_column(column)
