"""What an event says about its object: a few fields, named as the API's read shapes name
them (JobRead, SweepRead, ScheduleRunRead, VersionRead, AliasRead), small enough for every
receiver."""

from __future__ import annotations

import datetime as dt
from typing import Any

from services.models import (
    AliasMove,
    Job,
    ModelVersion,
    RegisteredModel,
    Schedule,
    ScheduleRun,
    Sweep,
)
from services.statuses import JobStatus


def _time(moment: dt.datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(dt.UTC).isoformat()


def job_event(status: JobStatus) -> str:
    """The event of a job ending with `status` (job.succeeded, job.failed, job.cancelled)."""
    return f"job.{status.value}"


def job_payload(job: Job) -> dict[str, Any]:
    """A job that has just ended."""
    return {
        "job": {
            "id": job.id,
            "name": job.name,
            "status": job.status.value,
            "reason": job.reason[:1000],
            "attempt": job.attempt,
            "schedule_id": job.schedule_id,
            "sweep_id": job.sweep_id,
            "created_at": _time(job.created_at),
            "started_at": _time(job.started_at),
            "finished_at": _time(job.finished_at),
        }
    }


def sweep_payload(sweep: Sweep) -> dict[str, Any]:
    """A sweep that has just ended (succeeded, failed or cancelled)."""
    return {
        "sweep": {
            "id": sweep.id,
            "name": sweep.name,
            "status": sweep.status.value,
            "reason": sweep.reason[:1000],
            "best_job_id": sweep.best_job_id,
            "best_value": sweep.best_value,
            "schedule_id": sweep.schedule_id,
            "finished_at": _time(sweep.finished_at),
        }
    }


def schedule_fired_payload(schedule: Schedule, run: ScheduleRun) -> dict[str, Any]:
    """A schedule's fire time that made a job or a sweep."""
    return {
        "schedule": {"id": schedule.id, "name": schedule.name},
        "run": {
            "scheduled_for": _time(run.scheduled_for),
            "outcome": run.outcome,
            "reason": run.reason[:1000],
            "job_id": run.job_id,
            "sweep_id": run.sweep_id,
        },
    }


def version_registered_payload(model: RegisteredModel, version: ModelVersion) -> dict[str, Any]:
    """A model's new version (model.version_registered)."""
    metrics = version.lineage.get("metrics") or {}
    return {
        "model": {"name": model.name},
        "version": {
            "version": version.version,
            "job_id": version.job_id,
            "registered_by": version.registered_by,
            "registered_at": _time(version.registered_at),
            "metrics": dict(list(metrics.items())[:50]),
        },
    }


def alias_moved_payload(model: RegisteredModel, alias: str, move: AliasMove) -> dict[str, Any]:
    """An alias pointed at a version (model.alias_moved): a promotion, or a rollback."""
    return {
        "model": {"name": model.name},
        "alias": {
            "name": alias,
            "from_version": move.from_version,
            "to_version": move.to_version,
            "moved_by": move.moved_by,
            "reason": move.reason[:1000],
            "moved_at": _time(move.moved_at),
        },
    }
