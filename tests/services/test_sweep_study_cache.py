"""The studies a scheduler keeps between passes (services/sweeps/study_cache.py), against
PostgreSQL: a kept study, caught up with the rows, asks and judges exactly as a study
built from the rows would, and one that holds what the rows do not is built anew.

Each sweep runs twice with the same seed and the same results: once as the scheduler
runs it (its studies kept), once with every study forgotten before each pass (built from
the rows, as before the cache). Their trials must get the same parameters and be stopped
at the same steps."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session

from services.models import Job, Sweep
from services.statuses import SweepStatus
from services.sweeps import store, study_cache
from services.sweeps import study as study_module
from services.sweeps.schemas import SweepCreate
from services.sweeps.study import StoredTrial, SweepStudy
from tests.services.test_sweep_optuna import (
    LAST_STEP,
    XY,
    Clock,
    a_pass,
    bowl,
    make,
    parameters,
    run_three_steps,
    sweep_spec,
    trials,
)

SPECS: dict[str, dict[str, Any]] = {
    "random": {"space": {"random": {**XY, "c": {"distribution": "choice", "values": [1, 2]}}}},
    "tpe": {"algorithm": "tpe", "space": {"random": XY}},
    "cmaes": {"algorithm": "cmaes", "space": {"random": XY}},
    "grid": {"algorithm": "grid", "space": {"grid": {"x": [0.0, 1.0, 2.0], "y": [-2.0, 0.0]}}},
    "asha": {
        "space": {"random": XY},
        "early_stopping": {"rule": "asha", "min_steps": 3, "reduction_factor": 3},
    },
    "tpe-hyperband": {
        "algorithm": "tpe",
        "space": {"random": XY},
        "early_stopping": {
            "rule": "hyperband",
            "min_steps": 3,
            "max_steps": LAST_STEP,
            "reduction_factor": 3,
        },
    },
}


class Built:
    """Counts the studies built (the cache's, not those a test builds to compare)."""

    count = 0
    counting = True


@pytest.fixture(autouse=True)
def counted(monkeypatch: pytest.MonkeyPatch) -> None:
    build = SweepStudy.__init__

    def counted_build(self: SweepStudy, **kwargs: Any) -> None:
        Built.count += Built.counting
        build(self, **kwargs)

    monkeypatch.setattr(SweepStudy, "__init__", counted_build)
    Built.count = 0


def small_spec(**fields: Any) -> SweepCreate:
    return sweep_spec(**{"space": {"random": XY, "seed": 1}, "trials": 4, **fields})


def run(session: Session, sweep: Sweep, *, forget: bool) -> tuple[list[Any], dict[Any, str]]:
    """Run the sweep to its end, each running trial reporting three steps of its curve a
    pass (`run_three_steps`): its trials' parameters in order, and who was stopped (trial
    index: reason). With `forget`, every pass builds its studies from the rows."""
    clock, reached = Clock(), dict[int, int]()
    for _ in range(300):
        run_three_steps(session, sweep, reached, lambda p: -bowl(p) / 50)
        if forget:
            study_cache.forget()
        a_pass(session, clock)
        if sweep.status is not SweepStatus.RUNNING:
            break
    assert sweep.status is SweepStatus.SUCCEEDED, sweep.reason
    jobs = trials(session, sweep)
    stopped = {job.trial_index: job.reason for job in jobs if store.is_stopped_early(job)}
    return [parameters(session, job) for job in jobs], stopped


def told(study: SweepStudy) -> list[tuple[Any, ...]]:
    """What a study holds of each trial, all its decisions are made from."""
    return [
        (t.number, t.state, t.values, t.params, t.intermediate_values, t.system_attrs)
        for t in study.study.get_trials(deepcopy=False)
    ]


@pytest.fixture
def shadowed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every study the cache hands a pass is compared with one built from the same rows;
    the list grows by one a comparison."""
    compared: list[int] = []
    handed = study_cache.study_for

    def checked(*, with_points: bool, **read: Any) -> SweepStudy:
        study = handed(with_points=with_points, **read)
        Built.counting = False
        try:
            assert told(study) == told(SweepStudy(**read))
        finally:
            Built.counting = True
        compared.append(1)
        return study

    monkeypatch.setattr(study_cache, "study_for", checked)
    return compared


@pytest.mark.parametrize("name", SPECS)
def test_a_kept_study_asks_and_judges_as_one_built_from_the_rows(
    session: Session, name: str, shadowed: list[int]
) -> None:
    spec = {**SPECS[name], "trials": 6 if name == "grid" else 12, "max_concurrent": 3}
    if "random" in spec["space"]:
        spec["space"] = {**spec["space"], "seed": 7}
    built = []
    outcomes = []
    for forget in (True, False):
        Built.count = 0
        sweep = make(session, **spec)
        outcomes.append(run(session, sweep, forget=forget))
        built.append(Built.count)
    (rebuilt, rebuilt_stops), (kept, kept_stops) = outcomes
    assert len(kept) == spec["trials"] and shadowed
    if "early_stopping" in spec:
        assert kept_stops, "the rule stopped no trial: the judging went untested"
    # The same parameters and the same trials stopped, at the same steps: but hyperband
    # puts a trial in a bracket by its sweep's id, so two sweeps are not comparable; its
    # kept studies were each compared with one built from the rows (`shadowed`) alone.
    if spec.get("early_stopping", {}).get("rule") != "hyperband":
        assert kept == rebuilt
        assert kept_stops == rebuilt_stops
    # Kept, the sweep's studies were built once each (one that asks, one that judges
    # with the points), and caught up in every later pass.
    assert built[1] <= 2 and built[1] < built[0], built


def test_a_trial_asked_in_a_pass_rolled_back_is_built_anew(session: Session) -> None:
    sweep = make(session, space={"random": XY, "seed": 3}, trials=4, max_concurrent=1)
    clock = Clock()
    with session.begin_nested() as undone:  # a pass whose transaction did not commit
        [first] = a_pass(session, clock).created
        job = session.get(Job, first)
        assert job is not None
        asked = parameters(session, job)
        undone.rollback()
    session.expire_all()
    assert trials(session, sweep) == []
    built = Built.count
    # The kept study holds trial 0, the rows none: it cannot be caught up, and a study
    # built from the rows asks trial 0 again, as the pass that was undone did.
    [again] = a_pass(session, clock).created
    job = session.get(Job, again)
    assert job is not None and job.trial_index == 0
    assert Built.count == built + 1
    assert parameters(session, job) == asked


def test_a_study_holding_what_the_rows_do_not_is_not_caught_up() -> None:
    from optuna.trial import TrialState

    spec = small_spec()
    study = SweepStudy(sweep_id=1, spec=spec, seed=1, trials=[])
    parameters_0, attrs_0 = study.ask(0)
    asked = StoredTrial(0, parameters_0, attrs_0, TrialState.RUNNING)
    ended = StoredTrial(0, parameters_0, attrs_0, TrialState.COMPLETE, value=0.5)
    other = StoredTrial(
        0, {**parameters_0, "x": parameters_0["x"] / 2}, attrs_0, TrialState.RUNNING
    )
    # Ended since: caught up, and the study holds it as ended.
    assert study.catch_up(spec=spec, seed=1, trials=[ended])
    assert study.study.trials[0].state is TrialState.COMPLETE
    assert study.study.trials[0].value == 0.5
    # Then running again, other parameters, another seed or spec, fewer trials: not so.
    assert not SweepStudy(sweep_id=1, spec=spec, seed=1, trials=[ended]).catch_up(
        spec=spec, seed=1, trials=[asked]
    )
    for trials_now, seed in (([other], 1), ([asked], 2), ([], 1)):
        fresh = SweepStudy(sweep_id=1, spec=spec, seed=1, trials=[])
        fresh.ask(0)
        assert not fresh.catch_up(spec=spec, seed=seed, trials=trials_now)
    fresh = SweepStudy(sweep_id=1, spec=spec, seed=1, trials=[])
    fresh.ask(0)
    assert not fresh.catch_up(spec=small_spec(trials=5), seed=1, trials=[asked])


@pytest.fixture
def bound_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], None]]:
    """Sets the kept studies' bound for a test, the usual one back after it (a later test
    in the process finds studies kept as the scheduler would)."""

    def at(capacity: int) -> None:
        monkeypatch.setattr(study_cache, "CAPACITY", capacity)
        study_cache.forget()

    yield at
    monkeypatch.undo()
    study_cache.forget()


def test_past_its_capacity_the_least_recently_used_studies_are_dropped(
    bound_at: Callable[[int], None],
) -> None:
    from optuna.trial import TrialState

    spec = small_spec()

    def one_trial(points: int) -> list[StoredTrial]:
        xy = {"x": 0.5, "y": 0.5}
        told = dict.fromkeys(range(points), 1.0)
        return [StoredTrial(0, xy, {}, TrialState.RUNNING, points=told)]

    held = one_trial(3)
    one = SweepStudy(sweep_id=0, spec=spec, seed=1, trials=held).size()
    assert one == study_module.TRIAL_BYTES + 3 * study_module.POINT_BYTES
    # Its size follows what it is told: caught up with two more points, as if built so.
    grown = SweepStudy(sweep_id=0, spec=spec, seed=1, trials=held)
    assert grown.catch_up(spec=spec, seed=1, trials=one_trial(5))
    assert grown.size() == one + 2 * study_module.POINT_BYTES
    bound_at(3 * one)  # three such studies, no more
    for sweep_id in (1, 2, 3):
        study_cache.keep(
            SweepStudy(sweep_id=sweep_id, spec=spec, seed=1, trials=held), with_points=True
        )

    def taken(sweep_id: int, trials: list[StoredTrial]) -> bool:
        """Whether the kept study was handed out (no study built)."""
        built = Built.count
        study = study_cache.study_for(
            sweep_id=sweep_id, spec=spec, seed=1, trials=trials, with_points=True
        )
        study_cache.keep(study, with_points=True)
        return Built.count == built

    assert taken(1, held)  # all three kept; sweep 1 now the most recent
    study_cache.keep(
        SweepStudy(sweep_id=4, spec=spec, seed=1, trials=held), with_points=True
    )  # four: sweep 2's dropped, the least recently used
    assert not taken(2, held)  # built anew, kept: sweep 3's dropped
    assert taken(1, held) and taken(4, held) and not taken(3, held)
    big = one_trial(3 * one // study_module.POINT_BYTES)  # larger than the capacity
    assert not taken(5, big) and not taken(5, big)  # never kept
