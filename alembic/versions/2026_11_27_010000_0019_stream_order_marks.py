"""stream order: where each status change and log line stands among a job's other rows

Revision ID: 0019_stream_order
Revises: 0018_fence
Create Date: 2026-11-27 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0019_stream_order"
down_revision: str | Sequence[str] | None = "0018_fence"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: PostgreSQL adds them without rewriting the tables. Rows stored
    # before have none (services/telemetry/stream_order.py reads that as 0).
    op.add_column("job_events", sa.Column("metric_mark", sa.BigInteger(), nullable=True))
    op.add_column("job_events", sa.Column("log_mark", sa.BigInteger(), nullable=True))
    op.add_column("log_lines", sa.Column("metric_mark", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("log_lines", "metric_mark")
    op.drop_column("job_events", "log_mark")
    op.drop_column("job_events", "metric_mark")
