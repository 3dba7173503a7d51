"""Move an alias (the one way an alias moves) and read aliases and their history.

A move is atomic: the alias's row is locked (FOR UPDATE) while its version changes and the
move is recorded, in one transaction. Two moves at once queue on that lock, so the second
records the first's version as its `from_version`: the history is one unbroken chain.
Service functions only add and flush; the caller commits.
"""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.exceptions import InvalidRegistryRequest, ModelNotFound
from services.models import AliasMove, ModelAlias, ModelVersion, RegisteredModel, Schedule, utcnow
from services.registry.names import DEFAULT_ALIAS, check_alias_name
from services.webhooks import payloads
from services.webhooks.outbox import emit


def _alias_query(model: RegisteredModel, alias: str) -> sa.Select[ModelAlias]:
    return sa.select(ModelAlias).where(ModelAlias.model_id == model.id, ModelAlias.name == alias)


def read_alias(*, session: Session, model: RegisteredModel, alias: str) -> ModelAlias:
    """The alias of the model.

    Raises:
        ModelNotFound: the model has no such alias.
    """
    row = session.execute(_alias_query(model, alias)).scalar_one_or_none()
    if row is None:
        raise ModelNotFound(f"alias {alias!r} of model {model.name!r}")
    return row


def _locked_alias(
    session: Session, model: RegisteredModel, alias: str, version: int, by: str, now: dt.datetime
) -> tuple[ModelAlias, bool]:
    """The alias row, locked; made (pointing at `version`) if it did not exist: (row, made)."""
    locked = _alias_query(model, alias).with_for_update().execution_options(populate_existing=True)
    row = session.execute(locked).scalar_one_or_none()
    if row is not None:
        return row, False
    try:
        with session.begin_nested():  # two first moves racing: one inserts, one locks it
            row = ModelAlias(
                model_id=model.id, name=alias, version=version, updated_by=by, updated_at=now
            )
            session.add(row)
            session.flush()
        return row, True
    except IntegrityError:
        return session.execute(locked).scalar_one(), False


def move_alias(
    *,
    session: Session,
    model: RegisteredModel,
    alias: str,
    version: int,
    by: str,
    reason: str = "",
    now: dt.datetime | None = None,
) -> AliasMove:
    """Point `alias` of the model at `version` (made if new) and record the move; a move
    to the version it already points at is recorded too (who confirmed it, and why).

    Raises:
        InvalidRegistryRequest: a bad alias name, or no such version of the model.
    """
    now = now or utcnow()
    check_alias_name(alias)
    target = session.execute(
        sa.select(ModelVersion).where(
            ModelVersion.model_id == model.id, ModelVersion.version == version
        )
    ).scalar_one_or_none()
    if target is None:
        raise InvalidRegistryRequest(
            "version",
            f"model {model.name!r} has no version {version}: give one of "
            f"1..{model.latest_version} (GET /api/v1/models/{model.name} lists them)",
        )
    row, made = _locked_alias(session, model, alias, version, by, now)
    move = AliasMove(
        alias_id=row.id,
        from_version=None if made else row.version,
        to_version=version,
        moved_by=by,
        reason=reason,
        moved_at=now,
    )
    row.version, row.updated_by, row.updated_at = version, by, now
    session.add(move)
    _schedules_follow(session, model, alias, target)
    session.flush()
    emit(
        session,
        project_id=model.project_id,
        event="model.alias_moved",
        payload=payloads.alias_moved_payload(model, alias, move),
    )
    return move


def _schedules_follow(
    session: Session, model: RegisteredModel, alias: str, target: ModelVersion
) -> None:
    """A schedule whose promotions move this alias judges its next run against what the
    alias holds now: after a rollback, the version rolled back to (its job, and that job's
    final value of the schedule's metric; an evaluating schedule judges the holder on its
    holdout again anyway). A schedule's own promotion has set both already."""
    schedules = session.execute(
        sa.select(Schedule).where(
            Schedule.project_id == model.project_id,
            sa.func.coalesce(Schedule.promote_alias, DEFAULT_ALIAS) == alias,
            Schedule.promote_metric.is_not(None),
        )
    ).scalars()
    for schedule in schedules:
        if (schedule.promote_model or schedule.name) != model.name:
            continue
        if schedule.promoted_job_id != target.job_id:
            metrics = target.lineage.get("metrics") or {}
            schedule.promoted_job_id = target.job_id
            schedule.promoted_value = metrics.get(schedule.promote_metric or "")


def list_aliases(*, session: Session, model_ids: list[int]) -> dict[int, list[ModelAlias]]:
    """The aliases of each model, by name."""
    found: dict[int, list[ModelAlias]] = {model_id: [] for model_id in model_ids}
    if model_ids:
        for row in session.execute(
            sa.select(ModelAlias)
            .where(ModelAlias.model_id.in_(model_ids))
            .order_by(ModelAlias.name)
        ).scalars():
            found[row.model_id].append(row)
    return found


def alias_history(*, session: Session, alias: ModelAlias, limit: int = 500) -> list[AliasMove]:
    """The alias's moves, newest first."""
    return list(
        session.execute(
            sa.select(AliasMove)
            .where(AliasMove.alias_id == alias.id)
            .order_by(AliasMove.id.desc())
            .limit(limit)
        ).scalars()
    )
