"""Champion against challenger: a schedule's `evaluate:` block judges each new model
against the promoted one on one holdout, by evaluation jobs.

When a scheduled run's job has succeeded, its decision (services/retraining/promotion.py)
asks `judge`: the first time, the holdout's content digest is taken and one evaluation job
is made for the new model, and one for the holder (the schedule's promoted job) unless
the holder already has an evaluation on that same digest. The decision waits while they
run; it compares the two values on the one digest, or is `evaluation_failed` when either
failed or reported no metric (the holder stays).

An evaluation job is a one_device job of the schedule's project, with the run's code
(trainer, bundle, image, command, environment): the trainer module's `evaluate(ctx)`
runs, or the block's `command`, with the model's files and the holdout's fetched
read-only (COHORT_MODEL_DIR, COHORT_HOLDOUT_DIR; `Job.evaluation` lists them). Each
`Evaluation` row is unique per (run, model job, holdout digest): two schedulers or a
retried pass make each evaluation job once. A holder's evaluation serves every later run
on the same digest, unless it failed (then the next run evaluates the holder again).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.exceptions import BundleNotFound, DataNotFound, InvalidJobSpec, QuotaError
from services.jobs import store as jobs
from services.jobs.data_versions import content_digest
from services.jobs.schemas import JobCreate
from services.models import Evaluation, Job, Schedule, ScheduleRun
from services.registry.schemas import EvaluationRead
from services.retraining import promotion
from services.retraining.read_schemas import ScheduleRunRead
from services.retraining.schemas import Evaluate
from services.settings import Settings
from services.statuses import TERMINAL_STATUSES, JobStatus
from services.storage import keys
from services.storage.store import ArtifactStore, open_store

# The run's code an evaluation job keeps from the schedule's job template.
_CODE_FIELDS = ("trainer", "command", "bundle", "image", "env", "pip", "hyperparameters")


@dataclass(frozen=True)
class Judgement:
    """What the evaluations say: the new model's value and the holder's on the same
    holdout digest (None: nothing promoted), or why no comparison can be made."""

    value: float | None = None
    previous: float | None = None
    failure: str = ""


def check_evaluate(
    *,
    evaluate: Evaluate | None,
    job_in: JobCreate | None,
    project_id: int,
    session: Session,
    settings: Settings,
) -> None:
    """Refuse an `evaluate:` block the schedule's job cannot run (a 422 naming the field).

    Raises:
        InvalidJobSpec: a sweep schedule, a command job without `evaluate.command` (or a
            trainer job with one), or a holdout with nothing at or under its path.
    """
    if evaluate is None:
        return
    if job_in is None:
        raise InvalidJobSpec(
            "evaluate", "a sweep schedule cannot name an evaluation yet; evaluate a job schedule"
        )
    if job_in.command is not None and evaluate.command is None:
        raise InvalidJobSpec(
            "evaluate.command",
            'the job runs a command: give the evaluation\'s too, e.g. ["python", "evaluate.py"]'
            " (it gets COHORT_MODEL_DIR and COHORT_HOLDOUT_DIR)",
        )
    if job_in.command is None and evaluate.command is not None:
        raise InvalidJobSpec(
            "evaluate.command",
            "the job runs a trainer: its module's evaluate(ctx) evaluates; drop the command",
        )
    store = open_store(settings=settings)
    if (
        content_digest(session=session, store=store, project_id=project_id, path=_path(evaluate))
        is None
    ):
        raise InvalidJobSpec(
            "evaluate.data",
            f"nothing at {evaluate.data!r} in this project's data: upload the holdout with "
            f"`cohort data push FILE {_path(evaluate)}/...` first",
        )


def apply(schedule: Schedule, evaluate: Evaluate | None) -> None:
    """Store the block; an evaluation implies promotion on its metric and mode."""
    schedule.evaluate = evaluate.model_dump(mode="json") if evaluate else None
    if evaluate is not None:
        schedule.promote_metric, schedule.promote_mode = evaluate.metric, evaluate.mode


def _path(evaluate: Evaluate) -> str:
    return evaluate.data.removeprefix(f"{keys.DATA_PREFIX}/")


def _files(store: ArtifactStore, prefix: str) -> dict[str, str]:
    """{relative path: store key} of every object under `prefix` (a model's), or of the
    one at it."""
    if store.exists(prefix):
        return {prefix.rsplit("/", 1)[-1]: prefix}
    return {key[len(prefix) + 1 :]: key for key, _size in store.list(prefix)}


def judge(
    *,
    session: Session,
    settings: Settings,
    run: ScheduleRun,
    job: Job,
    schedule: Schedule,
    now: dt.datetime,
) -> Judgement | None:
    """The run's evaluations, made on its first call; None while any is running."""
    spec = Evaluate.model_validate(schedule.evaluate)
    store = open_store(settings=settings)
    mine = session.execute(
        sa.select(Evaluation).where(Evaluation.run_id == run.id, Evaluation.model_job_id == job.id)
    ).scalar_one_or_none()
    if mine is None:
        version = content_digest(
            session=session, store=store, project_id=schedule.project_id, path=_path(spec)
        )
        if version is None:
            return Judgement(failure=f"the holdout {spec.data!r} has no files")
        # The files the digest was taken over (one listing): the job reads what it names.
        mine = _start(
            session,
            settings,
            store,
            (schedule, run, spec),
            job.id,
            (version.digest, version.members),
        )
    holder = _holder_evaluation(session, settings, store, (schedule, run, spec), job, mine)
    evaluations = [e for e in (mine, holder) if e is not None]
    for evaluation in evaluations:
        _settle(session, evaluation, now)
    if any(e.status == "running" for e in evaluations):
        return None
    for evaluation in evaluations:
        if evaluation.status != "succeeded":
            return Judgement(
                failure=f"evaluation of job {evaluation.model_job_id} on {spec.data} "
                f"({evaluation.holdout_digest[:19]}) failed: {evaluation.reason}"
            )
    return Judgement(value=mine.value, previous=holder.value if holder else None)


_Context = tuple[Schedule, ScheduleRun, Evaluate]


def _holder_evaluation(
    session: Session,
    settings: Settings,
    store: ArtifactStore,
    context: _Context,
    job: Job,
    mine: Evaluation,
) -> Evaluation | None:
    """The holder's evaluation on the digest `mine` ran on: one it has (succeeded, or
    still running for another run), or a new one on the same files; None when nothing is
    promoted. A failed one is not reused: this run evaluates the holder again."""
    schedule, run, spec = context
    holder_id = schedule.promoted_job_id
    if holder_id is None or holder_id == job.id:
        return None
    found = session.execute(
        sa.select(Evaluation)
        .where(
            Evaluation.schedule_id == schedule.id,
            Evaluation.model_job_id == holder_id,
            Evaluation.holdout_digest == mine.holdout_digest,
            (Evaluation.status != "failed") | (Evaluation.run_id == run.id),
        )
        .order_by(Evaluation.id.desc())
        .limit(1)
    ).scalar_one_or_none()
    if found is not None:
        return found
    mine_job = session.get(Job, mine.job_id) if mine.job_id else None
    holdout = (mine_job.evaluation or {}).get("holdout") if mine_job else None
    if not holdout:  # the new model's evaluation made no job: the holdout as it is now
        now_there = content_digest(
            session=session, store=store, project_id=schedule.project_id, path=_path(spec)
        )
        same = now_there is not None and now_there.digest == mine.holdout_digest
        holdout = now_there.members if now_there and same else {}
    return _start(session, settings, store, context, holder_id, (mine.holdout_digest, holdout))


def _find(session: Session, run_id: int, model_job_id: int, digest: str) -> Evaluation | None:
    return session.execute(
        sa.select(Evaluation).where(
            Evaluation.run_id == run_id,
            Evaluation.model_job_id == model_job_id,
            Evaluation.holdout_digest == digest,
        )
    ).scalar_one_or_none()


def _start(
    session: Session,
    settings: Settings,
    store: ArtifactStore,
    context: _Context,
    model_job_id: int,
    holdout: tuple[str, dict[str, str]],
) -> Evaluation:
    """One evaluation and its job, both or neither: the row's unique key makes a second
    scheduler's attempt come back with the first one's row."""
    schedule, run, spec = context
    digest, holdout_files = holdout
    evaluation = Evaluation(
        schedule_id=schedule.id,
        run_id=run.id,
        model_job_id=model_job_id,
        holdout_path=spec.data,
        holdout_digest=digest,
        metric=spec.metric,
        status="running",
        reason="",
    )
    model = _files(store, keys.model_prefix(model_job_id))
    try:
        with session.begin_nested():
            session.add(evaluation)
            session.flush()  # the unique key first: a lost race makes no job
            if not model:
                evaluation.status = "failed"
                evaluation.reason = f"job {model_job_id} has no model artifact in the store"
            else:
                _create_job(
                    session,
                    settings,
                    context,
                    evaluation,
                    {"model": model, "holdout": holdout_files},
                )
            session.flush()
    except IntegrityError:
        found = _find(session, run.id, model_job_id, digest)
        assert found is not None  # the row that made this insert fail
        return found
    return evaluation


def _create_job(
    session: Session,
    settings: Settings,
    context: _Context,
    evaluation: Evaluation,
    files: dict[str, dict[str, str]],
) -> None:
    """The evaluation job of `evaluation`, or the row failed with why none could be made."""
    schedule, _run, spec = context
    template: dict[str, Any] = {
        name: schedule.job_template[name] for name in _CODE_FIELDS if name in schedule.job_template
    }
    if spec.command is not None:
        template["command"] = spec.command
    name = f"evaluate-job{evaluation.model_job_id}-{schedule.name}"[:128]
    try:
        job_in = JobCreate.model_validate(
            {**template, "name": name, "strategy": "one_device", "replicas": 1}
        )
        job, _ = jobs.create_job(
            session=session, project_id=schedule.project_id, job_in=job_in, settings=settings
        )
    except (ValidationError, InvalidJobSpec, BundleNotFound, DataNotFound, QuotaError) as exc:
        evaluation.status, evaluation.reason = "failed", f"no evaluation job: {exc}"
        return
    job.evaluation = files
    evaluation.job_id = job.id


def _settle(session: Session, evaluation: Evaluation, now: dt.datetime) -> None:
    """Record a running evaluation's outcome once its job has ended and its metric came
    (or did not, within the promotion's grace)."""
    if evaluation.status != "running":
        return
    job = session.get(Job, evaluation.job_id) if evaluation.job_id else None
    if job is None:
        evaluation.status, evaluation.reason = "failed", "its evaluation job was deleted"
    elif job.status not in TERMINAL_STATUSES:
        return
    elif job.status is not JobStatus.SUCCEEDED:
        evaluation.status = "failed"
        evaluation.reason = f"evaluation job {job.id} {job.status}: {job.reason}"
    else:
        value = promotion.last_metric(session=session, job=job, name=evaluation.metric)
        if value is None:
            finished = job.finished_at or now
            if (now - finished).total_seconds() < promotion.METRIC_GRACE_SECONDS:
                return
            evaluation.status = "failed"
            evaluation.reason = f"evaluation job {job.id} reported no {evaluation.metric!r}"
        else:
            evaluation.status, evaluation.value = "succeeded", value
    evaluation.finished_at = now


def run_reads(*, session: Session, runs: list[ScheduleRun]) -> list[ScheduleRunRead]:
    """The API view of runs, each with the evaluations its decision asked for."""
    by_run: dict[int, list[EvaluationRead]] = {run.id: [] for run in runs}
    if runs:
        for evaluation in session.execute(
            sa.select(Evaluation).where(Evaluation.run_id.in_(list(by_run))).order_by(Evaluation.id)
        ).scalars():
            by_run[evaluation.run_id or 0].append(EvaluationRead.model_validate(evaluation))
    return [
        ScheduleRunRead.model_validate(run).model_copy(update={"evaluations": by_run[run.id]})
        for run in runs
    ]
