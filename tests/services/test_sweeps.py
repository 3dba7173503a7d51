"""Sweeps against PostgreSQL: the state machine the scheduler pass drives, capacity
rules, the median rule (Optuna's MedianPruner) on stored metrics, cancel, and the
objective. tests/services/test_sweep_optuna.py has the algorithms and the other rules."""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.jobs.transitions import transition_job
from services.models import Job, MetricPoint, Schedule, Sweep, utcnow
from services.settings import get_settings
from services.statuses import JobStatus, SweepStatus
from services.sweeps import advance, store
from services.sweeps.schemas import SweepCreate
from services.sweeps.views import to_read
from tests.factories import create_job, create_token

TEMPLATE = {
    "trainer": "mlp_digits",
    "strategy": "one_device",
    "replicas": 1,
    "hyperparameters": {"epochs": 1, "steps_per_epoch": 2},
}
GRID = {"grid": {"learning_rate": [0.1, 0.01], "width": [8, 16]}}


def make(session: Session, project_id: int | None = None, **spec: Any) -> Sweep:
    """A sweep of its own project, or of `project_id`'s."""
    if project_id is None:
        project_id = create_token(session)[1].project_id
    body = {
        "name": "lr",
        "template": TEMPLATE,
        "space": GRID,
        "max_concurrent": 2,
        "objective": {"metric": "eval_accuracy", "mode": "max"},
        **spec,
    }
    return store.create_sweep(
        session=session,
        project_id=project_id,
        sweep_in=SweepCreate.model_validate(body),
        settings=get_settings(),
    )


def later(seconds: float) -> dt.datetime:
    return utcnow() + dt.timedelta(seconds=seconds)


def step(session: Session, seconds: float = 0.0) -> advance.SweepsResult:
    return advance.advance_sweeps(session=session, settings=get_settings(), now=later(seconds))


def trials(session: Session, sweep: Sweep) -> list[Job]:
    return store.read_trials(session=session, sweep=sweep)


def finish(session: Session, job: Job, status: JobStatus = JobStatus.SUCCEEDED) -> None:
    for target in (JobStatus.SCHEDULED, JobStatus.RUNNING, status):
        transition_job(session=session, job_id=job.id, target=target, reason="test")


def start(session: Session, job: Job) -> None:
    for target in (JobStatus.SCHEDULED, JobStatus.RUNNING):
        transition_job(session=session, job_id=job.id, target=target, reason="test")


def report(
    session: Session,
    job: Job,
    values: list[float],
    name: str = "eval_accuracy",
    first_step: int = 1,
) -> None:
    for offset, value in enumerate(values):
        session.add(
            MetricPoint(
                job_id=job.id,
                attempt=job.attempt,
                replica=0,
                step=first_step + offset,
                epoch=None,
                name=name,
                value=value,
                ts=0.0,
            )
        )
    session.flush()


def test_trials_are_created_lazily_never_more_than_max_concurrent_unfinished(
    session: Session,
) -> None:
    sweep = make(session)
    assert sweep.trials_total == 4 and sweep.trials_created == 0
    assert len(step(session).created) == 2
    assert len(step(session).created) == 0  # two unfinished: the limit
    first, second = trials(session, sweep)
    assert (first.trial_index, second.trial_index) == (0, 1)
    assert first.sweep_id == sweep.id and first.name == "lr-t0"
    assert first.hyperparameters["epochs"] == 1 and first.hyperparameters["steps_per_epoch"] == 2
    finish(session, first)
    assert len(step(session).created) == 1
    assert len(step(session).created) == 0
    assert sweep.trials_created == 3
    finish(session, second, JobStatus.FAILED)
    assert len(step(session).created) == 1 and sweep.trials_created == 4
    # GridSampler ran every combination once, each job with its own.
    combos = {
        (j.hyperparameters["learning_rate"], j.hyperparameters["width"])
        for j in trials(session, sweep)
    }
    assert combos == {(0.1, 8), (0.1, 16), (0.01, 8), (0.01, 16)}
    view = to_read(session=session, sweep=sweep)
    assert [(t.parameters["learning_rate"], t.parameters["width"]) for t in view.trials or []] == [
        (j.hyperparameters["learning_rate"], j.hyperparameters["width"])
        for j in trials(session, sweep)
    ]


def test_a_sweep_succeeds_with_the_best_trial_by_its_objective(session: Session) -> None:
    sweep = make(session, max_concurrent=4)
    step(session)
    jobs = trials(session, sweep)
    for job, final in zip(jobs, [0.5, 0.9, 0.7, 0.2], strict=True):
        report(session, job, [0.95, final])  # `last`: the final value counts, not the best
        finish(session, job)
    assert step(session).ended == []  # the last metrics may still be on their way
    assert step(session, advance.METRIC_SETTLE_SECONDS + 1).ended == [sweep.id]
    assert sweep.status is SweepStatus.SUCCEEDED
    assert sweep.best_job_id == jobs[1].id and sweep.best_value == 0.9
    assert "best: trial 1" in sweep.reason and "4 succeeded" in sweep.reason
    view = to_read(session=session, sweep=sweep)
    hyper = jobs[1].hyperparameters
    assert view.best_parameters == {
        "learning_rate": hyper["learning_rate"],
        "width": hyper["width"],
    }
    assert [t.objective_value for t in view.trials or []] == [0.5, 0.9, 0.7, 0.2]


def test_objective_best_value_and_min_mode(session: Session) -> None:
    sweep = make(
        session, max_concurrent=4, objective={"metric": "loss", "mode": "min", "value": "best"}
    )
    step(session)
    jobs = trials(session, sweep)
    for job, series in zip(jobs, [[3, 1, 2], [2, 2, 2], [5, 0.5, 9], [4, 4, 4]], strict=True):
        report(session, job, [float(v) for v in series], name="loss")
        finish(session, job)
    step(session, 10)
    assert sweep.best_job_id == jobs[2].id and sweep.best_value == 0.5


def test_no_trial_succeeded_fails_the_sweep_with_the_count(session: Session) -> None:
    sweep = make(session, max_concurrent=4)
    step(session)
    for job in trials(session, sweep):
        finish(session, job, JobStatus.FAILED)
    step(session, 10)
    assert sweep.status is SweepStatus.FAILED and sweep.best_job_id is None
    assert sweep.reason == "no trial succeeded: 0 succeeded, 4 failed, 0 cancelled"


def test_a_metric_never_reported_ends_the_sweep_saying_so(session: Session) -> None:
    sweep = make(session, max_concurrent=4)
    step(session)
    for job in trials(session, sweep):
        report(session, job, [0.5], name="accuracy")  # not the objective's metric
        finish(session, job)
    step(session, 10)
    assert sweep.status is SweepStatus.RUNNING  # within the grace for late metrics
    step(session, advance.METRIC_GRACE_SECONDS + 1)
    assert sweep.status is SweepStatus.FAILED and sweep.best_job_id is None
    assert "no trial reported the objective metric 'eval_accuracy'" in sweep.reason


def test_no_new_trial_while_a_higher_priority_job_waits(session: Session) -> None:
    sweep = make(session, max_concurrent=4)
    urgent = create_job(session, sweep.project_id, **{**TEMPLATE, "priority": 5})
    assert step(session).created == []
    assert "priority 5" in sweep.reason
    finish(session, urgent)
    assert len(step(session).created) == 4


def test_an_unschedulable_higher_priority_job_blocks_nobody(session: Session) -> None:
    sweep = make(session, max_concurrent=1)
    big = create_job(session, sweep.project_id, **{**TEMPLATE, "priority": 5})
    big.reason = "unschedulable: needs 64 CPU slots, the cluster has 2 CPU slots"
    assert len(step(session).created) == 1


def test_median_rule_stops_a_trial_behind_and_the_sweep_still_succeeds(session: Session) -> None:
    sweep = make(session, max_concurrent=4, early_stopping={"rule": "median", "min_steps": 3})
    step(session)
    good, also_good, ok, bad = trials(session, sweep)
    for job in (ok, bad):
        start(session, job)
    report(session, good, [0.5, 0.7, 0.8, 0.9])
    report(session, also_good, [0.4, 0.6, 0.8, 0.85])
    for job in (good, also_good):
        finish(session, job)
    report(session, ok, [0.45, 0.65, 0.85])
    report(session, bad, [0.1, 0.1])
    assert step(session).stopped == []  # bad is at step 2, below min_steps
    report(session, bad, [0.12], first_step=3)
    assert step(session, 1).stopped == []  # judged at most every STOPPING_INTERVAL_SECONDS
    # At step 3 the finished trials had 0.8 and 0.8: bad's best (0.12) is below their
    # median, ok's (0.85) is not.
    assert step(session, advance.STOPPING_INTERVAL_SECONDS + 1).stopped == [bad.id]
    assert bad.status is JobStatus.CANCELLED and ok.status is JobStatus.RUNNING
    assert bad.reason.startswith("stopped early: median rule at step 3 (best eval_accuracy")
    assert "MedianPruner" in bad.reason
    transition_job(session=session, job_id=ok.id, target=JobStatus.SUCCEEDED, reason="test")
    step(session, 20)
    assert sweep.status is SweepStatus.SUCCEEDED and sweep.best_job_id == good.id
    assert "(1 stopped early)" in sweep.reason
    view = to_read(session=session, sweep=sweep)
    assert [t.stopped_early for t in view.trials or []] == [False, False, False, True]


def test_median_rule_keeps_a_trial_ahead_and_waits_for_enough_finished_trials(
    session: Session,
) -> None:
    sweep = make(
        session,
        space={"random": {"learning_rate": {"distribution": "uniform", "low": 0.01, "high": 0.1}}},
        trials=5,
        max_concurrent=5,
        early_stopping={"rule": "median", "min_steps": 2, "min_trials": 3},
    )
    step(session)
    a, b, c, d, e = trials(session, sweep)
    for job in (a, b):
        start(session, job)
    report(session, a, [0.1, 0.2])
    report(session, b, [0.5, 0.95])
    report(session, c, [0.5, 0.6])
    finish(session, c)
    assert step(session).stopped == []  # a is behind c, but one finished trial is not three
    report(session, d, [0.3, 0.9])
    finish(session, d)
    # Still two finished trials for a: not judged yet.
    assert step(session, advance.STOPPING_INTERVAL_SECONDS + 1).stopped == []
    report(session, e, [0.4, 0.7])
    finish(session, e)
    # Three finished now (0.6, 0.9, 0.7 at step 2): a (best 0.2) is behind their median and
    # is stopped; b (0.95) is ahead and runs on.
    assert step(session, 2 * advance.STOPPING_INTERVAL_SECONDS + 2).stopped == [a.id]
    assert b.status is JobStatus.RUNNING and sweep.status is SweepStatus.RUNNING


def test_cancelling_a_sweep_cancels_its_unfinished_trials_and_creates_no_more(
    session: Session,
) -> None:
    sweep = make(session)
    step(session)
    running, queued = trials(session, sweep)
    start(session, running)
    store.cancel_sweep(session=session, sweep=sweep)
    assert sweep.status is SweepStatus.CANCELLED and sweep.finished_at is not None
    assert running.status is JobStatus.CANCELLED and queued.status is JobStatus.CANCELLED
    assert running.reason == f"sweep {sweep.id} cancelled: cancelled by user"
    assert step(session).created == []
    assert len(trials(session, sweep)) == 2


def test_random_sweep_with_a_seed_draws_the_same_parameters_twice(session: Session) -> None:
    space = {
        "random": {
            "learning_rate": {"distribution": "log_uniform", "low": 1e-4, "high": 0.1},
            "width": {"distribution": "int", "low": 8, "high": 64},
            "act": {"distribution": "choice", "values": ["relu", "tanh"]},
            "dropout": {"distribution": "uniform", "low": 0, "high": 0.5},
        },
        "seed": 42,
    }
    drawn = []
    for _ in range(2):
        sweep = make(session, space=space, trials=5, max_concurrent=5)
        step(session)
        drawn.append(
            [
                {k: job.hyperparameters[k] for k in ("learning_rate", "width", "act", "dropout")}
                for job in trials(session, sweep)
            ]
        )
        view = to_read(session=session, sweep=sweep)
        assert [t.parameters for t in view.trials or []] == drawn[-1]
    assert drawn[0] == drawn[1] and len(drawn[0]) == 5
    assert len({p["learning_rate"] for p in drawn[0]}) == 5
    for p in drawn[0]:
        assert 1e-4 <= p["learning_rate"] <= 0.1 and 8 <= p["width"] <= 64
        assert p["act"] in ("relu", "tanh") and 0 <= p["dropout"] <= 0.5


def test_a_trial_parameter_may_set_the_replica_count(session: Session) -> None:
    sweep = make(
        session,
        template={**TEMPLATE, "strategy": "multi_worker_mirrored"},
        space={"grid": {"replicas": [1, 2]}},
    )
    step(session)
    assert sorted(job.replicas for job in trials(session, sweep)) == [1, 2]
    assert "replicas" not in trials(session, sweep)[0].hyperparameters


def test_the_pass_runs_the_sweeps(session: Session) -> None:
    from services.scheduling.scheduler_pass import run_pass

    sweep = make(session)
    run_pass(session=session, settings=get_settings(), heartbeats=[])
    assert (
        session.execute(sa.select(sa.func.count()).where(Job.sweep_id == sweep.id)).scalar_one()
        == 2
    )


def sweep_schedule(session: Session) -> Schedule:
    """A schedule that fires a sweep over GRID and promotes its best eval_accuracy."""
    from services.retraining import schedules
    from services.retraining.schemas import ScheduleCreate

    _, token = create_token(session)
    body = {
        "name": "nightly-sweep",
        "interval_seconds": 3600,
        "promote": {"metric": "eval_accuracy", "mode": "max"},
        "sweep": {
            "template": TEMPLATE,
            "space": GRID,
            "max_concurrent": 4,
            "objective": {"metric": "eval_accuracy", "mode": "max"},
        },
    }
    return schedules.create_schedule(
        session=session,
        project_id=token.project_id,
        schedule_in=ScheduleCreate.model_validate(body),
        settings=get_settings(),
    )


def test_a_scheduled_sweep_promotes_its_best_trial(session: Session) -> None:
    from services.models import ScheduleRun
    from services.retraining import firing
    from services.scheduling.scheduler_pass import run_pass

    schedule = sweep_schedule(session)
    assert schedule.job_template == {} and schedule.sweep_template is not None
    run = firing.trigger_schedule(session=session, settings=get_settings(), schedule=schedule)
    assert run is not None and run.sweep_id is not None and run.decision == "pending"
    sweep = session.get(Sweep, run.sweep_id)
    assert sweep is not None and sweep.schedule_id == schedule.id
    assert sweep.name.startswith("nightly-sweep-")

    def a_pass(seconds: float) -> None:
        run_pass(session=session, settings=get_settings(), heartbeats=[], now=later(seconds))

    a_pass(0)  # the real scheduler pass creates the trials
    jobs = trials(session, sweep)
    assert len(jobs) == 4
    for job, final in zip(jobs, [0.6, 0.8, 0.95, 0.7], strict=True):
        report(session, job, [final])
        finish(session, job)
    a_pass(10)  # the sweep ends...
    assert sweep.status is SweepStatus.SUCCEEDED and sweep.best_job_id == jobs[2].id
    a_pass(11)  # ...and then its run is decided on the best trial
    session.refresh(run)
    assert run.decision == "promoted" and run.job_id == jobs[2].id
    assert run.metric_value == 0.95
    assert schedule.promoted_job_id == jobs[2].id and schedule.promoted_value == 0.95
    assert (
        session.execute(
            sa.select(sa.func.count())
            .select_from(ScheduleRun)
            .where(ScheduleRun.schedule_id == schedule.id)
        ).scalar_one()
        == 1
    )


def test_a_scheduled_sweep_without_a_best_trial_is_not_eligible(session: Session) -> None:
    from services.retraining import firing, promotion

    schedule = sweep_schedule(session)
    run = firing.trigger_schedule(session=session, settings=get_settings(), schedule=schedule)
    assert run is not None
    assert promotion.decide_pending(session=session) == []  # the sweep is still running
    sweep = session.get(Sweep, run.sweep_id)
    step(session)
    for job in trials(session, sweep):
        finish(session, job, JobStatus.FAILED)
    step(session, 10)
    assert promotion.decide_pending(session=session) == [run]
    assert run.decision == "not_eligible" and "no trial succeeded" in run.decision_reason
    assert schedule.promoted_job_id is None


def test_a_pass_reads_and_admits_once_for_all_the_sweeps_that_create_trials(
    session: Session,
) -> None:
    # One sweep at a time, a pass cost 16 statements for each sweep creating a trial (its
    # lock, its spec, trials, rows, values, the quota's reads, the inserts): 1.6 s for 100.
    _, token = create_token(session)

    def statements_to_create(count: int) -> list[str]:
        made = [make(session, token.project_id, max_concurrent=1) for _ in range(count)]
        session.flush()
        seen: list[str] = []

        def count_it(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
            seen.append(" ".join(statement.split())[:60])

        engine = session.get_bind()
        sa.event.listen(engine, "before_cursor_execute", count_it)
        try:
            created = step(session).created
        finally:
            sa.event.remove(engine, "before_cursor_execute", count_it)
        assert sorted(session.get(Job, i).sweep_id for i in created) == [s.id for s in made]
        assert all(s.trials_created == 1 for s in made)
        # One INSERT a job (services/jobs/admission.py says why); the rest is shared.
        return [sql for sql in seen if not sql.startswith("INSERT INTO jobs")]

    statements_to_create(1)  # from here on, each round's pass also sees earlier sweeps
    few, many = statements_to_create(2), statements_to_create(8)
    assert len(many) == len(few) <= 20, (few, many)
