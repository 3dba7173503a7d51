"""How long a running replica may go without progress, and what its hang is called: the
limits the watchdog applies (running_checks.py) and the reasons a user reads, each naming
what counts as progress (docs/your-code.md, "What counts as progress")."""

from __future__ import annotations

from services.settings import Settings


def hang_limit(job_progress_timeout: int | None, default: float) -> float | None:
    """Seconds a running replica may go without progress: the job's own
    `progress_timeout_seconds` if set, else the cluster's `default`; None when the
    job set 0 (no progress watchdog: the start-up timeout and the deadline still apply).
    """
    if job_progress_timeout is None:
        return default
    if job_progress_timeout < 0:
        raise ValueError(f"progress_timeout_seconds must be 0 or more, not {job_progress_timeout}")
    return float(job_progress_timeout) if job_progress_timeout else None


# What the watchdog counts as progress, named in a hang's reason (docs/your-code.md,
# "What counts as progress").
SIGNS = (
    "no output, training step, metric (TensorBoard scalar or cohort.report()) or file "
    "written under $COHORT_CHECKPOINT_DIR or $COHORT_MODEL_DIR"
)


def startup_failure(limit: float | None, settings: Settings, formed: bool) -> str | None:
    """Why a running replica that has not shown progress yet is hung, if it is.
    `formed`: every replica of its gang has started."""
    startup = settings.STARTUP_TIMEOUT
    if limit is None:
        # The job turned the progress watchdog off: its loop may never show progress,
        # so the start-up limit covers only the gang's processes being started.
        if not formed:
            return (
                f"hung: the gang's processes were not all started within {startup:.0f}s "
                "of this one's start"
            )
        return None
    if not formed:
        return (
            f"hung: no training step within {startup:.0f}s of its start, and its gang never "
            "formed: a replica of it was never started (its output counts as progress only "
            "once every replica has started)"
        )
    return (
        f"hung: no training step within {startup:.0f}s of its start: {SIGNS} "
        "(did every replica of the gang join?)"
    )
