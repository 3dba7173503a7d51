"""An evaluation job's replica (a schedule's `evaluate:`, services/retraining/
evaluation.py): the trainer module's `evaluate(ctx)` judges the saved model in
`ctx.model_dir` (fetched read-only by the agent) on the holdout in `ctx.holdout_dir`,
and its returned metrics are the job's final ones, as a trainer's are."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from services.wire.replica import ReplicaSpec
from workers import layout
from workers.point_buffer import status_line
from workers.replica.callbacks import ReplicaReporter, announce, warn
from workers.replica.trainers import Evaluator, TrainerContext

EXIT_OK = 0
EXIT_CONFIG = 2


def holdout_dir(ctx: TrainerContext) -> Path:
    """COHORT_HOLDOUT_DIR, as the agent names it; by hand, the job directory's."""
    return Path(os.environ.get("COHORT_HOLDOUT_DIR") or layout.JobDirs(ctx.job_dir).holdout_dir)


def run(
    spec: ReplicaSpec, evaluate: Evaluator | None, ctx: TrainerContext, reporter: ReplicaReporter
) -> int:
    """Evaluate and report; a trainer module without `evaluate(ctx)` is a configuration
    error (exit 2), said in the job's log."""
    if evaluate is None:
        status_line(
            f"cohort: bad replica configuration: trainer {spec.trainer!r} has no "
            "evaluate(ctx) next to it in its module, which an evaluation job runs",
            sys.stderr,
        )
        return EXIT_CONFIG
    ctx.holdout_dir = holdout_dir(ctx)
    result = dict(evaluate(ctx) or {})
    announce(f"evaluation of {ctx.model_dir} on {ctx.holdout_dir}: {result}")
    if not reporter.report_final(result):
        warn(f"evaluation metrics could not be written ({reporter.pending} points lost)")
    return EXIT_OK
