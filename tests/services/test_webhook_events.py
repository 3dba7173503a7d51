"""Which changes record which webhook events (services/webhooks/outbox.py wired into the
rooms that make them): a schedule's fire that made a job, a sweep's end (all its trials
failed, or cancelled), a job cancelled; each body names its object and project, and a
webhook hears only the events it subscribed to."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.jobs import store as jobs
from services.models import Job, WebhookDelivery
from services.settings import get_settings
from services.statuses import JobStatus
from services.sweeps import store as sweeps
from services.webhooks import store
from services.webhooks.schemas import WebhookCreate
from tests.factories import create_job, create_token
from tests.services import test_schedules, test_sweeps

PUBLIC = "http://93.184.215.14/hook"  # a literal public address: no resolver, nothing sent


def subscribe(session: Session, *events: str) -> int:
    _, token = create_token(session)  # the project of the helpers' schedules and sweeps
    return store.create_webhook(
        session=session,
        project_id=token.project_id,
        webhook_in=WebhookCreate(url=PUBLIC, events=list(events)),
        settings=get_settings(),
    ).id


def bodies(session: Session, hook: int) -> list[dict[str, Any]]:
    rows = session.execute(
        sa.select(WebhookDelivery.body)
        .where(WebhookDelivery.webhook_id == hook)
        .order_by(WebhookDelivery.created_at)
    ).scalars()
    return [json.loads(body) for body in rows]


def test_a_schedules_fire_that_made_a_job_is_schedule_fired(session: Session) -> None:
    hook = subscribe(session, "schedule.fired")
    schedule = test_schedules.make(session)
    fired = test_schedules.fire(session, test_schedules.T0 + dt.timedelta(seconds=10))
    [body] = bodies(session, hook)
    assert body["event"] == "schedule.fired" and body["project"] == "default"
    assert body["data"]["schedule"] == {"id": schedule.id, "name": "nightly"}
    assert body["data"]["run"]["job_id"] == fired.jobs[0]
    assert body["data"]["run"]["scheduled_for"].startswith("2026-06-01T12:00:10")
    test_schedules.fire(session, test_schedules.T0 + dt.timedelta(seconds=10))  # handled
    assert len(bodies(session, hook)) == 1


def test_a_sweep_that_ends_is_sweep_ended_and_its_trials_are_job_events(
    session: Session,
) -> None:
    hook = subscribe(session, "sweep.ended")
    trials_hook = subscribe(session, "job.failed")
    sweep = test_sweeps.make(session, max_concurrent=4)
    test_sweeps.step(session)
    for job in test_sweeps.trials(session, sweep):
        test_sweeps.finish(session, job, JobStatus.FAILED)
    test_sweeps.step(session, 10)
    [ended] = bodies(session, hook)
    assert ended["event"] == "sweep.ended"
    assert ended["data"]["sweep"]["id"] == sweep.id
    assert ended["data"]["sweep"]["status"] == "failed"
    assert ended["data"]["sweep"]["reason"].startswith("no trial succeeded")
    failed = bodies(session, trials_hook)
    assert sorted(b["data"]["job"]["sweep_id"] for b in failed) == [sweep.id] * 4
    assert {b["event"] for b in failed} == {"job.failed"}


def test_a_cancelled_sweep_and_a_cancelled_job_are_announced(session: Session) -> None:
    hook = subscribe(session, "sweep.ended", "job.cancelled")
    sweep = test_sweeps.make(session)
    test_sweeps.step(session)
    sweeps.cancel_sweep(session=session, sweep=sweep, reason="enough")
    job = create_job(session, sweep.project_id, name="lone", trainer="mlp_digits")
    jobs.request_cancel(session=session, job=session.get(Job, job.id), reason="not needed")
    events = [(b["event"], b["data"]) for b in bodies(session, hook)]
    assert [e for e, _ in events].count("job.cancelled") == 3  # 2 trials, then the lone job
    assert ("sweep.ended", "cancelled") in [
        (e, d["sweep"]["status"]) for e, d in events if e == "sweep.ended"
    ]
    lone = [d["job"] for e, d in events if e == "job.cancelled" and d["job"]["id"] == job.id]
    assert lone == [{**lone[0], "status": "cancelled", "reason": "not needed"}]


def test_a_promotion_and_a_rollback_are_the_registrys_events(session: Session) -> None:
    from services.registry import aliases, versions
    from services.retraining import promotion

    hook = subscribe(session, "model.version_registered", "model.alias_moved")
    schedule = test_schedules.make(session, promote={"metric": "eval_accuracy", "mode": "max"})
    for second, value in ((10, 0.8), (20, 0.9)):
        (job_id,) = test_schedules.fire(
            session, test_schedules.T0 + dt.timedelta(seconds=second)
        ).jobs
        test_schedules.finish(session, job_id)
        test_schedules._report(session, job_id, value)
        promotion.decide_pending(session=session)
    model = versions.read_model(session=session, project_id=schedule.project_id, name="nightly")
    aliases.move_alias(
        session=session, model=model, alias="production", version=1, by="ops", reason="bad data"
    )
    events = [(b["event"], b["data"]) for b in bodies(session, hook)]
    assert [e for e, _ in events] == ["model.version_registered", "model.alias_moved"] * 2 + [
        "model.alias_moved"
    ]
    registered = [d["version"] for e, d in events if e == "model.version_registered"]
    assert [(v["version"], v["metrics"]["eval_accuracy"]) for v in registered] == [
        (1, 0.8),
        (2, 0.9),
    ]
    rollback = events[-1][1]
    assert rollback["model"] == {"name": "nightly"}
    assert (rollback["alias"]["from_version"], rollback["alias"]["to_version"]) == (2, 1)
    assert (rollback["alias"]["moved_by"], rollback["alias"]["reason"]) == ("ops", "bad data")
