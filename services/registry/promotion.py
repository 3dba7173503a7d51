"""A schedule's runs in the registry: each judged run's job becomes the next version of the
schedule's model (`promote.model`, by default the schedule's name), and a promoted one's
also gets the schedule's alias (`promote.alias`, by default `production`), in the
transaction that records the decision. How the decision is reached is
services/retraining/promotion.py's."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.orm import Session

from services.models import Job, ModelVersion, RegisteredModel, Schedule
from services.registry.aliases import move_alias
from services.registry.names import DEFAULT_ALIAS, actor
from services.registry.versions import register_version
from services.storage.store import open_store

__all__ = ["DEFAULT_ALIAS", "model_of", "promote_version", "register_run"]


def model_of(schedule: Schedule) -> tuple[str, str]:
    """(model name, alias) a schedule's promotions go to."""
    return schedule.promote_model or schedule.name, schedule.promote_alias or DEFAULT_ALIAS


def register_run(
    *, session: Session, schedule: Schedule, job: Job, now: dt.datetime
) -> ModelVersion:
    """Register a judged run's model as the next version of the schedule's model, whether
    or not it is promoted: every version a schedule made stays comparable and can be
    rolled back to.

    The model's files are not looked for: the job succeeded and reported its metric, and
    refusing here would stop the scheduler's pass (a version without files answers 404 to
    its download). The store is opened for the inputs' digests (their data's records: a
    listing of each input, hashing only files stored behind Cohort's back).
    """
    name, _alias = model_of(schedule)
    return register_version(
        session=session,
        project_id=schedule.project_id,
        name=name,
        job_id=job.id,
        by=actor("schedule", schedule.name, schedule.id),
        store=open_store(),
        look_for_model=False,
        now=now,
    )


def promote_version(
    *, session: Session, schedule: Schedule, version: ModelVersion, reason: str, now: dt.datetime
) -> None:
    """Move the schedule's alias to `version`, `reason` in the alias's history."""
    _name, alias = model_of(schedule)
    model = session.get(RegisteredModel, version.model_id)
    assert model is not None  # locked and flushed by register_version
    move_alias(
        session=session,
        model=model,
        alias=alias,
        version=version.version,
        by=actor("schedule", schedule.name, schedule.id),
        reason=reason,
        now=now,
    )
