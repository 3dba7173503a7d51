"""sweep trials: each trial's parameters and Optuna's state of it, now that Optuna chooses
the parameters (they can no longer be recomputed from the seed and the index)

The trials stored before get their parameters back from their jobs (a parameter is a
job field or a hyperparameter of the same name). A grid sweep still running keeps its
order: the combinations it has yet to create get a row now, in the order it ran them
(`itertools.product` of the grid as given), which the pass hands Optuna as fixed
parameters. A random sweep still running draws its remaining trials with Optuna's
sampler under the same seed.

Revision ID: 0023_sweep_trials
Revises: 0022_image_jobs
Create Date: 2026-11-29 12:00:00
"""

import itertools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from alembic import op

revision: str = "0023_sweep_trials"
down_revision: str | Sequence[str] | None = "0022_image_jobs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JOB_FIELDS = ("replicas", "gpus_per_replica", "strategy")

sweeps = sa.table(
    "sweeps",
    sa.column("id", sa.Integer()),
    sa.column("spec", sa.JSON()),
    sa.column("status", sa.String()),
    sa.column("trials_created", sa.Integer()),
    sa.column("trials_total", sa.Integer()),
)
jobs = sa.table(
    "jobs",
    sa.column("sweep_id", sa.Integer()),
    sa.column("trial_index", sa.Integer()),
    sa.column("hyperparameters", sa.JSON()),
    *(sa.column(name) for name in JOB_FIELDS),
)


def _names(space: dict[str, Any]) -> list[str]:
    return list(space.get("grid") or space.get("random") or {})


def _rows(connection: sa.Connection, sweep: Any) -> list[dict[str, Any]]:
    space = (sweep.spec or {}).get("space", {})
    names = _names(space)
    rows = []
    for job in connection.execute(sa.select(jobs).where(jobs.c.sweep_id == sweep.id)):
        hyper = job.hyperparameters or {}
        params = {
            name: getattr(job, name) if name in JOB_FIELDS else hyper.get(name)
            for name in names
            if name in JOB_FIELDS or name in hyper
        }
        rows.append({"sweep_id": sweep.id, "trial_index": job.trial_index, "parameters": params})
    grid = space.get("grid")
    if grid and sweep.status == "running":
        combos = itertools.product(*grid.values())
        for index, values in enumerate(combos):
            if index >= sweep.trials_created:
                params = dict(zip(grid, values, strict=True))
                rows.append({"sweep_id": sweep.id, "trial_index": index, "parameters": params})
    return rows


def upgrade() -> None:
    trials = op.create_table(
        "sweep_trials",
        sa.Column("sweep_id", sa.Integer(), nullable=False),
        sa.Column("trial_index", sa.Integer(), nullable=False),
        sa.Column("parameters", sa.JSON(), nullable=False),
        sa.Column("system_attrs", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("sweep_id", "trial_index"),
    )
    connection = op.get_bind()
    for sweep in connection.execute(sa.select(sweeps)).all():
        rows = [{**row, "system_attrs": {}} for row in _rows(connection, sweep)]
        if rows:
            connection.execute(sa.insert(trials), rows)


def downgrade() -> None:
    op.drop_table("sweep_trials")
