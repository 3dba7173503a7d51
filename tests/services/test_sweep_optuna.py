"""Sweeps carried out by Optuna, against PostgreSQL: the scheduler pass creates the trials,
the test writes each trial's objective points to the database as the ingest would (a
known function of its parameters), and the pass tells, judges and stops.

Every run here is deterministic: seeded samplers, the same points.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.jobs.transitions import transition_job
from services.models import Job, MetricPoint, Sweep, SweepTrial, utcnow
from services.settings import get_settings
from services.statuses import JobStatus, SweepStatus
from services.sweeps import advance, store
from services.sweeps.schemas import SweepCreate
from services.sweeps.views import to_read
from tests.factories import create_token

TEMPLATE = {
    "trainer": "mlp_digits",
    "strategy": "one_device",
    "replicas": 1,
    "hyperparameters": {"epochs": 1, "steps_per_epoch": 2},
}
XY = {
    "x": {"distribution": "uniform", "low": -5.0, "high": 5.0},
    "y": {"distribution": "uniform", "low": -5.0, "high": 5.0},
}


def bowl(params: dict[str, Any]) -> float:
    """The toy objective (minimised): 0 at x=1, y=-2."""
    return (params["x"] - 1) ** 2 + (params["y"] + 2) ** 2


class Clock:
    """The pass's `now`: far enough ahead for each pass to settle and judge."""

    def __init__(self) -> None:
        self.now = utcnow()

    def tick(self, seconds: float = advance.STOPPING_INTERVAL_SECONDS + 1) -> dt.datetime:
        self.now += dt.timedelta(seconds=seconds)
        return self.now


def sweep_spec(**spec: Any) -> SweepCreate:
    """A sweep's spec: the name, template and objective the tests share, then `spec`."""
    body = {
        "name": "opt",
        "template": TEMPLATE,
        "max_concurrent": 1,
        "objective": {"metric": "loss", "mode": "min"},
        **spec,
    }
    return SweepCreate.model_validate(body)


def make(session: Session, **spec: Any) -> Sweep:
    _, token = create_token(session)
    return store.create_sweep(
        session=session,
        project_id=token.project_id,
        sweep_in=sweep_spec(**spec),
        settings=get_settings(),
    )


def a_pass(session: Session, clock: Clock) -> advance.SweepsResult:
    return advance.advance_sweeps(session=session, settings=get_settings(), now=clock.tick())


def trials(session: Session, sweep: Sweep) -> list[Job]:
    return store.read_trials(session=session, sweep=sweep)


def parameters(session: Session, job: Job) -> dict[str, Any]:
    return dict(
        session.execute(
            sa.select(SweepTrial.parameters).where(
                SweepTrial.sweep_id == job.sweep_id, SweepTrial.trial_index == job.trial_index
            )
        ).scalar_one()
    )


def report(session: Session, job: Job, points: dict[int, float], name: str = "loss") -> None:
    session.execute(
        sa.insert(MetricPoint),
        [
            {
                "job_id": job.id,
                "attempt": job.attempt,
                "replica": 0,
                "step": step,
                "epoch": None,
                "name": name,
                "value": value,
                "ts": 0.0,
            }
            for step, value in points.items()
        ],
    )


def move(session: Session, job: Job, *targets: JobStatus) -> None:
    for target in targets:
        transition_job(session=session, job_id=job.id, target=target, reason="test")


def run_to_end(
    session: Session, sweep: Sweep, objective: Callable[[dict[str, Any]], float]
) -> list[float]:
    """Run every trial as soon as it is created, its objective reported at step 1; the
    objective values in trial order."""
    clock = Clock()
    for _ in range(sweep.trials_total + 5):
        for job_id in a_pass(session, clock).created:
            job = session.get(Job, job_id)
            assert job is not None
            report(session, job, {1: objective(parameters(session, job))})
            move(session, job, JobStatus.SCHEDULED, JobStatus.RUNNING, JobStatus.SUCCEEDED)
        if sweep.status is not SweepStatus.RUNNING:
            break
    assert sweep.status is SweepStatus.SUCCEEDED, sweep.reason
    view = to_read(session=session, sweep=sweep)
    return [t.objective_value for t in view.trials or [] if t.objective_value is not None]


def test_tpe_beats_the_median_of_random_sweeps_of_the_same_budget(session: Session) -> None:
    best: dict[str, list[float]] = {"random": [], "tpe": []}
    for algorithm in best:
        for seed in (1, 2, 3):
            sweep = make(
                session, algorithm=algorithm, space={"random": XY, "seed": seed}, trials=24
            )
            values = run_to_end(session, sweep, bowl)
            assert len(values) == 24
            assert sweep.best_value == min(values)
            best[algorithm].append(min(values))
    random_median = sorted(best["random"])[1]
    # TPE's first 10 trials are random draws (n_startup_trials); its next 14 learn.
    assert all(value < random_median for value in best["tpe"]), best


def test_the_same_seed_gives_the_same_parameters_however_trials_fall_into_passes(
    session: Session,
) -> None:
    space = {"random": {**XY, "act": {"distribution": "choice", "values": ["relu", "tanh"]}}}
    drawn = []
    for concurrent in (6, 1, 1):
        seed = 11 if len(drawn) < 2 else 12
        sweep = make(session, space={**space, "seed": seed}, trials=6, max_concurrent=concurrent)
        run_to_end(session, sweep, bowl)
        drawn.append([parameters(session, job) for job in trials(session, sweep)])
    # Six trials in one pass, or one a pass: the same parameters; another seed, others.
    assert drawn[0] == drawn[1] and drawn[0] != drawn[2]
    assert all(p["act"] in ("relu", "tanh") and -5 <= p["x"] <= 5 for p in drawn[0])


def test_tpe_and_cmaes_repeat_themselves_given_the_same_results(session: Session) -> None:
    for algorithm in ("tpe", "cmaes"):
        runs = []
        for _ in range(2):
            sweep = make(session, algorithm=algorithm, space={"random": XY, "seed": 5}, trials=16)
            runs.append((run_to_end(session, sweep, bowl), sweep))
        (first, a), (second, b) = runs
        assert first == second and len(set(first)) == 16
        assert [parameters(session, j) for j in trials(session, a)] == [
            parameters(session, j) for j in trials(session, b)
        ]
    # CMA-ES's optimizer, saved with a trial once its first generation was told, is what
    # the later passes restored.
    rows = session.execute(sa.select(SweepTrial.system_attrs).where(SweepTrial.sweep_id == b.id))
    assert any("cma:optimizer:0" in attrs for attrs in rows.scalars())


def test_a_grid_runs_each_combination_once_and_the_best_wins(session: Session) -> None:
    grid = {"x": [-1.0, 0.0, 1.0, 2.0], "y": [-2.0, 0.0]}
    sweep = make(session, space={"grid": grid}, max_concurrent=3)
    values = run_to_end(session, sweep, bowl)
    combos = [tuple(parameters(session, j).values()) for j in trials(session, sweep)]
    assert sorted(combos) == sorted((x, y) for x in grid["x"] for y in grid["y"])
    assert sweep.best_value == 0.0 == min(values)
    best = to_read(session=session, sweep=sweep).best_parameters
    assert best == {"x": 1.0, "y": -2.0}


def curve(quality: float, step: int) -> float:
    """A trial's loss at `step`: falls with the steps, to `1 - quality`."""
    return (1 - quality) + math.exp(-step / 4)


LAST_STEP = 27  # asha's rungs at steps 3, 9 and 27 (min 3, factor 3)


def run_three_steps(
    session: Session,
    sweep: Sweep,
    reached: dict[int, int],
    quality: Callable[[dict[str, Any]], float],
) -> None:
    """A tick of the sweep's trials: the queued ones start, each running one reports its
    next three steps of `curve` (so a judgement falls on each rung), at the quality
    `quality` gives its parameters, and ends at LAST_STEP. `reached`: each trial's last
    step so far, by job id."""
    for job in trials(session, sweep):
        if job.status is JobStatus.QUEUED:
            move(session, job, JobStatus.SCHEDULED, JobStatus.RUNNING)
        if job.status is not JobStatus.RUNNING:
            continue
        first = reached.get(job.id, 0) + 1
        good = quality(parameters(session, job))
        report(session, job, {s: curve(good, s) for s in range(first, first + 3)})
        reached[job.id] = first + 2
        if reached[job.id] >= LAST_STEP:
            move(session, job, JobStatus.SUCCEEDED)


def test_asha_stops_most_bad_trials_at_the_first_rung(session: Session) -> None:
    sweep = make(
        session,
        space={"random": {"quality": {"distribution": "uniform", "low": 0, "high": 1}}, "seed": 3},
        trials=24,
        max_concurrent=4,
        early_stopping={"rule": "asha", "min_steps": 3, "reduction_factor": 3},
    )
    clock, reached = Clock(), {}
    for _ in range(200):
        run_three_steps(session, sweep, reached, lambda p: float(p["quality"]))
        a_pass(session, clock)
        if sweep.status is not SweepStatus.RUNNING:
            break
    assert sweep.status is SweepStatus.SUCCEEDED, sweep.reason
    jobs = trials(session, sweep)
    quality = {job.id: parameters(session, job)["quality"] for job in jobs}
    stopped_at = {
        job.id: int(job.reason.split(" at step ")[1].split()[0])
        for job in jobs
        if store.is_stopped_early(job)
    }
    bad = [job.id for job in jobs if quality[job.id] < 0.5]
    assert len(bad) >= 8, quality
    at_first_rung = [job_id for job_id in bad if stopped_at.get(job_id) == 3]
    assert len(at_first_rung) >= 0.75 * len(bad), (stopped_at, quality)
    assert all("asha rule at step" in j.reason for j in jobs if j.id in stopped_at)
    # The best trial ran to the end and is the sweep's best, never a stopped one.
    best = max(jobs, key=lambda job: quality[job.id])
    assert best.status is JobStatus.SUCCEEDED and sweep.best_job_id == best.id
    # The rung values the pruner recorded are in the trials' rows (a restarted
    # scheduler goes on from them).
    attrs = session.execute(
        sa.select(SweepTrial.system_attrs).where(SweepTrial.sweep_id == sweep.id)
    )
    assert sum(1 for a in attrs.scalars() if "completed_rung_0" in a) == len(jobs)


def test_hyperband_stops_trials_behind_within_the_step_budget(session: Session) -> None:
    sweep = make(
        session,
        space={"random": {"quality": {"distribution": "uniform", "low": 0, "high": 1}}, "seed": 4},
        trials=12,
        max_concurrent=12,
        early_stopping={"rule": "hyperband", "min_steps": 1, "max_steps": 27},
    )
    clock = Clock()
    a_pass(session, clock)
    jobs = trials(session, sweep)
    for job in jobs:
        move(session, job, JobStatus.SCHEDULED, JobStatus.RUNNING)
    for tick in range(27):
        for job in jobs:
            if job.status is JobStatus.RUNNING:
                report(
                    session, job, {tick + 1: curve(parameters(session, job)["quality"], tick + 1)}
                )
        a_pass(session, clock)
    stopped = [job for job in jobs if store.is_stopped_early(job)]
    assert stopped and all("hyperband rule at step" in j.reason for j in stopped)
    assert "HyperbandPruner" in stopped[0].reason
    # Judged at every step, a trial is stopped on a rung: 1, 3, 9 or 27 (factor 3).
    assert {int(j.reason.split(" at step ")[1].split()[0]) for j in stopped} <= {1, 3, 9, 27}
    running = [job for job in jobs if job.status is JobStatus.RUNNING]
    assert running, "hyperband's least aggressive bracket stops nobody"


def test_a_trial_whose_job_was_deleted_counts_as_failed(session: Session) -> None:
    from services.jobs import store as job_store

    sweep = make(
        session, algorithm="tpe", space={"random": XY, "seed": 2}, trials=4, max_concurrent=2
    )
    clock = Clock()
    assert sweep.trials_created == 0
    first, second = (session.get(Job, i) for i in a_pass(session, clock).created)
    assert first is not None and second is not None
    report(session, first, {1: 3.0})
    move(session, first, JobStatus.SCHEDULED, JobStatus.RUNNING, JobStatus.SUCCEEDED)
    job_store.delete_jobs(session=session, job_ids=[second.id])
    session.expire_all()
    # Trial 1 is a failed trial to the study now; trials 2 and 3 are asked after it.
    created = [session.get(Job, i) for i in a_pass(session, clock).created]
    assert [job.trial_index for job in created if job] == [2, 3]
    assert sweep.trials_created == 4 and sweep.status is SweepStatus.RUNNING


def test_a_spec_stored_before_optuna_still_loads_and_runs(session: Session) -> None:
    # The spec of a sweep stored before the algorithm and the rules: no `algorithm`, an
    # early-stopping block without `rule`.
    spec = SweepCreate.model_validate(
        {
            "template": TEMPLATE,
            "space": {"random": XY, "seed": 9},
            "trials": 3,
            "objective": {"metric": "loss", "mode": "min"},
            "early_stopping": {"min_steps": 2},
        }
    )
    assert spec.search_algorithm == "random"
    assert spec.early_stopping is not None and spec.early_stopping.rule == "median"
    sweep = make(session, space={"random": XY, "seed": 9}, trials=3)
    sweep.spec = {k: v for k, v in sweep.spec.items() if k != "algorithm"} | {
        "early_stopping": {"min_steps": 2}
    }
    assert len(run_to_end(session, sweep, bowl)) == 3


def test_parameters_fixed_ahead_are_the_ones_a_trial_gets(session: Session) -> None:
    # As the migration leaves a grid sweep that was running: its remaining combinations
    # in the order it ran them.
    sweep = make(session, space={"grid": {"x": [0.0, 1.0, 2.0], "y": [-2.0]}}, max_concurrent=3)
    for index, x in enumerate([2.0, 0.0, 1.0]):
        session.add(
            SweepTrial(sweep_id=sweep.id, trial_index=index, parameters={"x": x, "y": -2.0})
        )
    session.flush()
    run_to_end(session, sweep, bowl)
    assert [parameters(session, j)["x"] for j in trials(session, sweep)] == [2.0, 0.0, 1.0]
    assert [j.hyperparameters["x"] for j in trials(session, sweep)] == [2.0, 0.0, 1.0]


def test_an_error_of_optunas_ends_the_sweep_not_the_pass(session: Session) -> None:
    broken = make(session, space={"random": XY, "seed": 1}, trials=3)
    other = make(session, space={"random": XY, "seed": 2}, trials=3)
    clock = Clock()
    first = [session.get(Job, i) for i in a_pass(session, clock).created]
    # A stored parameter outside its distribution: the study cannot be rebuilt.
    row = session.get(SweepTrial, (broken.id, 0))
    assert row is not None
    row.parameters = {"x": 99.0, "y": 0.0}
    for job in first:
        assert job is not None
        move(session, job, JobStatus.SCHEDULED, JobStatus.RUNNING, JobStatus.FAILED)
    created = a_pass(session, clock).created
    assert broken.status is SweepStatus.FAILED
    assert broken.reason.startswith("trial 1 was refused: ") and "Optuna could not" in broken.reason
    assert [session.get(Job, i).sweep_id for i in created] == [other.id]  # type: ignore[union-attr]
