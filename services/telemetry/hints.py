"""What to tell a person looking at a job that reported no metrics: how its kind of code
reports them (docs/your-code.md, "Metrics without importing Cohort"). One wording for
the CLI (`cohort job metrics`, `--follow`'s summary) and the dashboard's job page."""

from __future__ import annotations

from services.jobs.trainers import BUILTIN_TRAINERS

TENSORBOARD_OR_REPORT = (
    "write TensorBoard scalars under $COHORT_TENSORBOARD_DIR or call cohort.report()"
)


def how_to_report(trainer: str | None) -> str:
    """How code of this kind reports metrics (`trainer` None: a command)."""
    if trainer is None:
        return TENSORBOARD_OR_REPORT
    if trainer in BUILTIN_TRAINERS:
        return "the built-in trainer reports them from its first step: its logs say why none came"
    return f"pass ctx.callbacks() to model.fit, {TENSORBOARD_OR_REPORT}"


def no_metrics_hint(job_id: int, trainer: str | None, *, finished: bool) -> str:
    """`job 7 reported no metrics: write TensorBoard scalars ...` (`finished`: the job
    ended; else it has none yet)."""
    said = "reported no metrics" if finished else "has reported no metrics yet"
    return f"job {job_id} {said}: {how_to_report(trainer)}"
