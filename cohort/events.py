"""A job's stream as typed events (`Job.follow()`): status changes, metric points and the
replicas' output lines, in the order the API stored them."""

from __future__ import annotations

from dataclasses import dataclass

from cohort.api_models import JobRead, MetricPointRead
from cohort.sse import Event


@dataclass(frozen=True)
class StatusEvent:
    """The job's status changed; `job` is the job as of the change, `reason` the change's
    own (`job.reason` is the newest only)."""

    id: str | None
    job: JobRead
    reason: str


@dataclass(frozen=True)
class MetricEvent:
    id: str | None
    point: MetricPointRead


@dataclass(frozen=True)
class LogEvent:
    """One line a replica wrote (`ts`: when the agent read it, unix seconds)."""

    id: str | None
    attempt: int
    replica: int
    ts: float
    line: str


JobEvent = StatusEvent | MetricEvent | LogEvent

# The statuses a job ends in (services/statuses.py's TERMINAL_STATUSES; a test keeps the
# two the same).
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})


def is_last(event: Event) -> bool:
    """Whether this is a job stream's last event: its terminal status."""
    return event.event == "status" and event.data.get("status") in TERMINAL


def typed_event(event: Event) -> JobEvent | None:
    """The typed form of one SSE event of a job's stream (None: a kind it does not know,
    from a newer server)."""
    data = event.data
    if event.event == "status":
        change = data.get("change") or {}
        reason = change.get("reason", data.get("reason")) or ""
        return StatusEvent(event.id, JobRead.model_validate(data), reason)
    if event.event == "metric":
        return MetricEvent(event.id, MetricPointRead.model_validate(data))
    if event.event == "log":
        line = (data["attempt"], data["replica"], data["ts"], data["line"])
        return LogEvent(event.id, *line)
    return None
