"""Data triggers: a schedule fires once per new content of a file or prefix of its
project's data (`trigger: {data: "data/<path>", settle_seconds: N}`).

Cheap first: the pass asks SQL only for each trigger's newest change (`data_files`,
written by the api as each upload or delete answers; one grouped query for every
schedule) and compares it with the newest change the schedule has already looked at
(`data_seen_at`). Only a newer change that has settled, that is at least
`settle_seconds` old, so an upload of many files is one run, costs a digest
(services/jobs/data_versions.py `content_digest`, which lists the store).

Exactly once, as for fire times (firing.py): the schedule row is locked while it fires
(two schedulers: one skips it, the other re-reads what the first stored), and a run
record carries its data version under the unique (schedule_id, data_version) key, in
the savepoint of its job. A content fires a schedule once, ever: pushing back an
earlier content fires nothing.

The content there when a trigger is set counts as handled (`fire_on_existing` says
otherwise), as Airflow's dataset schedules fire on updates after they are created: a
schedule created over a year of data starts no retraining of its own accord. Paused
schedules are not looked at; once resumed, only the newest content fires (as a cron
schedule's missed runs). Data deleted: nothing to fire.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any, Literal

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.exceptions import InvalidJobSpec
from services.jobs.data_versions import (
    DataVersion,
    at_or_under,
    content_digest,
    newest_change,
)
from services.jobs.schemas import JobCreate
from services.models import DataFileRecord, Schedule, ScheduleRun, utcnow
from services.retraining.fire_env import Fire
from services.retraining.fire_runs import start_run
from services.retraining.trigger_schemas import (
    DataTrigger,
    DataTriggerIn,
    TriggerSpec,
    TriggerView,
)
from services.settings import Settings
from services.storage.store import ArtifactStore, open_store

log = logging.getLogger("cohort.schedules")

Step = Literal["idle", "wait", "check"]
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
# A trigger set on a path with no data yet looks for changes from a minute before: an
# upload racing the setting is then seen (and fires: there was no content before it).
RACE_MARGIN = dt.timedelta(seconds=60)


def decide(
    *, newest: dt.datetime | None, seen: dt.datetime | None, settle_seconds: int, now: dt.datetime
) -> Step:
    """What a pass does about one trigger: nothing changed since it last looked (idle),
    a change is still settling (wait), or a settled change is worth a digest (check)."""
    if newest is None or (seen is not None and newest <= seen):
        return "idle"
    if (now - newest).total_seconds() < settle_seconds:
        return "wait"
    return "check"


def _newest_per_trigger(session: Session) -> list[tuple[int, dt.datetime | None]]:
    """(schedule id, newest change under its trigger) of every unpaused trigger whose
    data changed since it last looked: one query, SQL only. Per schedule, an index probe
    (ix_data_files_changes) of its project's changes since it last looked: nothing, for
    one whose data did not change."""
    since = sa.func.coalesce(Schedule.data_seen_at, EPOCH)
    newest = (
        sa.select(sa.func.max(DataFileRecord.updated_at))
        .where(
            DataFileRecord.project_id == Schedule.project_id,
            DataFileRecord.updated_at > since,
            at_or_under(Schedule.trigger_path),
        )
        .correlate(Schedule)
        .scalar_subquery()
    )
    query = sa.select(Schedule.id, newest).where(
        Schedule.trigger_path.is_not(None), Schedule.paused.is_(False)
    )
    return [(row[0], row[1]) for row in session.execute(query) if row[1] is not None]


def fire_data_triggers(
    *, session: Session, settings: Settings, now: dt.datetime
) -> list[ScheduleRun]:
    """Fire every data-triggered schedule whose data has a new, settled content; the
    caller commits."""
    settled = [
        schedule_id
        for schedule_id, newest in _newest_per_trigger(session)
        if newest is not None and newest <= now
    ]
    if not settled:
        return []
    locked = session.execute(
        sa.select(Schedule)
        .where(Schedule.id.in_(settled), Schedule.paused.is_(False))
        .order_by(Schedule.id)
        .with_for_update(of=Schedule, skip_locked=True)
        .execution_options(populate_existing=True)
    ).scalars()
    store: ArtifactStore | None = None
    runs: list[ScheduleRun] = []
    for schedule in locked:
        if schedule.trigger_path is None:
            continue
        newest = newest_change(
            session=session, project_id=schedule.project_id, path=schedule.trigger_path
        )
        step = decide(
            newest=newest,
            seen=schedule.data_seen_at,
            settle_seconds=schedule.trigger_settle_seconds,
            now=now,
        )
        if step != "check" or newest is None:
            continue
        store = store or open_store(settings=settings)
        try:
            # One schedule's trouble (its store, its template) must not stop the others.
            with session.begin_nested():
                run = fire_on_data(session, settings, store, schedule, newest, now)
        except Exception:
            log.exception("schedule %s could not fire on its data", schedule.id)
            continue
        runs += [run] if run is not None else []
    return runs


def fire_on_data(
    session: Session,
    settings: Settings,
    store: ArtifactStore,
    schedule: Schedule,
    newest: dt.datetime,
    now: dt.datetime,
) -> ScheduleRun | None:
    """Digest a locked schedule's settled data and fire for it if the content is new."""
    assert schedule.trigger_path is not None
    version = content_digest(
        session=session, store=store, project_id=schedule.project_id, path=schedule.trigger_path
    )
    if version is not None and (now - version.updated_at).total_seconds() < (
        schedule.trigger_settle_seconds
    ):
        # The digest found files the table did not know (written behind the api's
        # back) and recorded them just now: they settle first, and a later pass fires.
        return None
    schedule.data_seen_at = max(newest, version.updated_at) if version else newest
    if version is None or version.digest == schedule.data_version:
        return None  # deleted, or the same content pushed again: nothing to fire
    fire = Fire(
        now,
        interval_start=schedule.data_version_at,
        interval_end=version.updated_at,
        data_version=version.digest,
    )
    run = start_run(session=session, settings=settings, schedule=schedule, fire=fire)
    _handled(schedule, version)
    return run


def _handled(schedule: Schedule, version: DataVersion | None) -> None:
    schedule.data_version = version.digest if version else None
    schedule.data_version_at = version.updated_at if version else None


def set_trigger(
    session: Session, settings: Settings, schedule: Schedule, trigger: DataTriggerIn | None
) -> None:
    """Set (or with None, remove) a schedule's data trigger. The content there now
    counts as handled, unless the trigger asks to fire on it."""
    same = trigger is not None and trigger.path == schedule.trigger_path
    schedule.trigger_path = trigger.path if trigger else None
    schedule.trigger_settle_seconds = trigger.settle_seconds if trigger else 30
    if same and trigger is not None and not trigger.fire_on_existing:
        return  # the same data: what was handled stays handled, a pending change pending
    version = None
    if trigger is not None and not trigger.fire_on_existing:
        version = content_digest(
            session=session,
            store=open_store(settings=settings),
            project_id=schedule.project_id,
            path=trigger.path,
        )
    _handled(schedule, version)
    schedule.data_seen_at = _looked_at(session, schedule, version)


def _looked_at(
    session: Session, schedule: Schedule, version: DataVersion | None
) -> dt.datetime | None:
    """Where a newly set trigger starts looking for changes: after the content it counts
    as handled; just before the newest change, for one that fires on what is there; from
    a minute ago on a path with no data (an upload racing the setting is then seen)."""
    if schedule.trigger_path is None:
        return None
    if version is not None:
        return version.updated_at
    newest = newest_change(
        session=session, project_id=schedule.project_id, path=schedule.trigger_path
    )
    if newest is not None:
        return newest - dt.timedelta(microseconds=1)
    return utcnow() - RACE_MARGIN


def checkable(job_in: JobCreate, given: TriggerSpec, stored: str | None = None) -> JobCreate:
    """The job template as the schedule's checks see it: without the inputs under its
    data trigger (the one given, else `stored`), which need not exist yet: their first
    push is what starts the first run."""
    trigger = given.trigger if "trigger" in given.model_fields_set else None
    path = trigger.path if trigger else stored
    if path is None:
        return job_in
    inputs = {
        name: source
        for name, source in job_in.inputs.items()
        if source != f"data/{path}" and not source.startswith(f"data/{path}/")
    }
    return job_in.model_copy(update={"inputs": inputs})


def update_trigger(
    session: Session, settings: Settings, schedule: Schedule, given: TriggerSpec
) -> None:
    """PATCH's `trigger`: set, changed or (with null) removed, if the schedule keeps a
    way to fire.

    Raises:
        InvalidJobSpec: it would have none (422 naming `trigger`).
    """
    if "trigger" not in given.model_fields_set:
        return
    if given.trigger is None and schedule.cron is None and not schedule.interval_seconds:
        raise InvalidJobSpec(
            "trigger", "the schedule has no cron or interval_seconds: give one to remove it"
        )
    set_trigger(session, settings, schedule, given.trigger)


def view(schedule: Schedule) -> dict[str, Any]:
    """The API view of a schedule's data trigger (TriggerView's fields)."""
    trigger = None
    if schedule.trigger_path is not None:
        trigger = DataTrigger(
            data=f"data/{schedule.trigger_path}", settle_seconds=schedule.trigger_settle_seconds
        )
    shown = TriggerView(
        trigger=trigger,
        data_version=schedule.data_version,
        data_version_at=schedule.data_version_at,
    )
    return dict(shown)
