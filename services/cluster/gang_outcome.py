"""What a gang's replicas add up to: a success (every replica exited 0, or a
parameter_server chief's exit 0, its evaluator given EVALUATOR_GRACE), or a break that
restarts the job (per its restart_policy and budget, after a backoff) or fails it.
gangs.settle_job acts on it.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import Session

from services import exit_codes
from services.jobs.transitions import transition_job
from services.models import Job, Replica
from services.settings import get_settings
from services.statuses import TERMINAL_REPLICA_STATUSES, JobStatus, ReplicaStatus

# How long a stop message may take to reach its agent and be acted on (a scheduling
# pass, the broker, a busy agent): the margin on STOP_GRACE before a hung replica's
# process is taken to be gone.
STOP_DELIVERY_SECONDS = 3.0


def _failure_reason(replica: Replica) -> str:
    if replica.failure:
        return f"replica {replica.index} on {replica.node_id} {replica.failure}"
    tail = [line for line in replica.log_tail.strip().splitlines() if line.strip()][-3:]
    detail = (": " + " | ".join(tail)) if tail else ""
    return (
        f"replica {replica.index} on {replica.node_id} exited with "
        f"{exit_codes.describe(replica.exit_code, replica.log_tail)}{detail}"
    )


def _may_restart(job: Job, broken: Replica) -> tuple[bool, str]:
    """Whether the policy and the budget allow another attempt, and if not, why.

    A permanent failure (services/exit_codes.py: a program that cannot run as given)
    is restarted under no policy: the next attempt would fail the same way, after a
    backoff, as often as the budget allows. `on_failure` restarts the rest, a program's
    own errors included; `exit_code` only what came from outside the program."""
    if job.restart_policy == "never":
        return False, "restart_policy is never"
    kind = exit_codes.classify(broken.exit_code, broken.log_tail)
    if job.restart_policy == "exit_code" and kind is not exit_codes.FailureKind.RETRYABLE:
        return False, "the exit code is not retryable"
    if kind is exit_codes.FailureKind.PERMANENT:
        return False, "the failure is permanent (another attempt would fail the same way)"
    # Attempts moved off drained nodes (drains.py) are not restarts.
    if job.attempt - job.moved_attempts > job.max_restarts:
        return False, f"restart budget spent ({job.max_restarts} restarts)"
    return True, ""


def restart_backoff(attempt: int) -> float:
    """Seconds before attempt `attempt + 1` may be placed: doubling from RESTART_BACKOFF."""
    settings = get_settings()
    doubling: float = 2 ** (attempt - 1)
    return min(settings.RESTART_BACKOFF * doubling, settings.RESTART_BACKOFF_MAX)


def _declared_hung(replica: Replica) -> bool:
    """Declared failed by Cohort on a node that still answers (the watchdog's hang
    finding: lost replicas are LOST), with no exit of its own: its process may be there,
    frozen, until its agent's SIGKILL after STOP_GRACE."""
    return (
        replica.status is ReplicaStatus.FAILED
        and replica.exit_code is None
        and bool(replica.failure)
    )


def restart_delay(job: Job, current: list[Replica], backoff: float | None = None) -> float:
    """Seconds before the next attempt of a gang torn down now may be placed: the backoff
    (`backoff`, else the restart's: a drain's move has none), and never less than the stop
    of a hung replica takes (its SIGTERM, SIGKILL after STOP_GRACE, and the stop message's
    way there), so that no process of this attempt still runs when the next one starts
    (the chaos soak found two alive at once)."""
    delay = restart_backoff(job.attempt) if backoff is None else backoff
    if any(_declared_hung(r) for r in current):
        delay = max(delay, get_settings().STOP_GRACE + STOP_DELIVERY_SECONDS)
    return delay


def draining(current: list[Replica]) -> bool:
    """Whether the gang was asked to checkpoint now (a node of it drained): the drain step
    (drains.advance_drains) moves it once every replica has answered, or its grace ran
    out; until then an exit (75, CHECKPOINTED) breaks nothing."""
    return any(r.checkpoint_requested_at is not None for r in current)


def breaks_gang(replica: Replica) -> bool:
    """A failed or lost replica tears its gang down, unless it is an evaluator."""
    return (
        replica.status in (ReplicaStatus.FAILED, ReplicaStatus.LOST) and replica.role != "evaluator"
    )


def success(job: Job, current: list[Replica], now: dt.datetime) -> tuple[str | None, list[Replica]]:
    """Why the gang has succeeded (None: not yet), and the replicas to stop now."""
    if job.strategy != "parameter_server":
        done = all(r.status is ReplicaStatus.SUCCEEDED for r in current)
        return (f"all {len(current)} replicas exited 0" if done else None), []
    chief = next((r for r in current if r.role == "chief"), None)
    if chief is None or chief.status is not ReplicaStatus.SUCCEEDED:
        return None, []
    servers = [r for r in current if r.role in ("worker", "ps")]
    evaluating = [
        r for r in current if r.role == "evaluator" and r.status not in TERMINAL_REPLICA_STATUSES
    ]
    if (
        evaluating
        and chief.finished_at is not None
        and (now - chief.finished_at) < dt.timedelta(seconds=get_settings().EVALUATOR_GRACE)
    ):
        return None, servers  # the evaluator is finishing its last evaluation
    late = "; the evaluator was stopped after its grace" if evaluating else ""
    return f"the chief exited 0{late}", servers + evaluating


def gone_evaluator(replica: Replica) -> bool:
    """An evaluator that already ended (even failed) does not hold its gang back."""
    return replica.role == "evaluator" and replica.status in TERMINAL_REPLICA_STATUSES


def tear_down(
    *, session: Session, job: Job, current: list[Replica], broken: Replica, now: dt.datetime
) -> None:
    """The gang broke at `broken`: the job restarts (after restart_delay) if its policy
    and budget allow, else fails; its replicas' stops are the caller's to send."""
    reason = _failure_reason(broken)
    restart, why_not = _may_restart(job, broken)
    if restart:
        delay = restart_delay(job, current)
        job.not_before = now + dt.timedelta(seconds=delay)
        transition_job(
            session=session,
            job_id=job.id,
            target=JobStatus.RESTARTING,
            reason=f"restarting (attempt {job.attempt + 1} of at most "
            f"{job.max_restarts + job.moved_attempts + 1}, in {delay:.0f}s) after: {reason}",
        )
    else:
        transition_job(
            session=session,
            job_id=job.id,
            target=JobStatus.FAILED,
            reason=f"{reason}; not restarted: {why_not}",
        )
