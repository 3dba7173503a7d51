"""A sweep's Optuna study, in memory, made from Cohort's tables for each decision the
scheduler pass makes: ask the parameters of a new trial, or ask the pruner whether a
running trial stops. The pass takes it from services/sweeps/study_cache.py, which keeps
a sweep's study between passes and catches it up with the tables (`catch_up`), or
builds it anew where it cannot.

Optuna's state lives in Cohort's own tables, not in Optuna's RDBStorage:

- one transaction: the pass creates a trial's job and stores what Optuna chose for it
  (`SweepTrial`: its parameters and Optuna's system attributes) in the transaction it
  commits, under the pass lock and the sweep's row lock. RDBStorage writes through its
  own connections and commits on its own: a pass that rolls back (a second scheduler
  took over) would leave Optuna a trial with no job, or a job Optuna never heard of;
- the tables are the truth: a restarted scheduler, or a second one after a failover,
  builds the same study from the same rows, and a study kept from an earlier pass is
  used only once checked against them;
- RDBStorage on Cohort's database stamps and checks its schema in `alembic_version`,
  the table Cohort's own migrations use (it would take Cohort's revision for its own and
  refuse to start), and adds tables Cohort's migrations do not know;
- speed: an in-memory study of a few hundred trials is built in milliseconds, where each
  RDBStorage call is a round trip or more (bench/sweeps_optuna.py has the figures).

The study holds every trial, numbered by its index (GridSampler hands trial n the n-th
point of its shuffled grid; HyperbandPruner puts trial n in a bracket by its number and
the study name): the parameters, Optuna's system attributes (GridSampler's grid point,
CmaEsSampler's generation and saved optimizer, SuccessiveHalvingPruner's rung values,
kept across passes in `SweepTrial.system_attrs`), the objective's points as
intermediate values, and, for an ended trial, the state `tell` gives it: COMPLETE with
its objective value, PRUNED when the rule stopped it, FAIL otherwise.

Each trial is asked with its own sampler, seeded from the sweep's seed and its index:
the same seed gives the same parameters however trials fall into passes (for tpe and
cmaes, given the same results before it). Choices and grid values are given to Optuna
as the index of the value in their list (any JSON value can be a choice; Optuna's
categorical distribution works on the index anyway).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.pruners import (
    BasePruner,
    HyperbandPruner,
    MedianPruner,
    NopPruner,
    SuccessiveHalvingPruner,
)
from optuna.samplers import BaseSampler, CmaEsSampler, GridSampler, RandomSampler, TPESampler
from optuna.storages import InMemoryStorage
from optuna.trial import Trial, TrialState, create_trial

from services.sweeps.rules import AshaStopping, EarlyStopping, HyperbandStopping
from services.sweeps.schemas import Choice, IntRange, LogUniform, SearchSpace, SweepCreate

# The pass builds a study for each decision: Optuna's INFO line for every new study would
# flood the scheduler's log. Its warnings go through the process's logging like any
# library's, not Optuna's own stderr handler.
optuna.logging.set_verbosity(optuna.logging.WARNING)
optuna.logging.disable_default_handler()
optuna.logging.enable_propagation()


@dataclass(frozen=True)
class StoredTrial:
    """A trial as the database has it (services/sweeps/history.py reads it)."""

    index: int
    parameters: dict[str, Any]
    system_attrs: dict[str, Any]
    state: TrialState
    value: float | None = None  # COMPLETE only
    points: dict[int, float] = field(default_factory=dict)  # the objective's, by step


class _Space:
    """The sweep's space as Optuna distributions, and its values to and from them."""

    def __init__(self, space: SearchSpace) -> None:
        self.choices: dict[str, list[Any]] = {}
        self.distributions: dict[str, BaseDistribution] = {}
        if space.grid:
            self.choices = {name: list(values) for name, values in space.grid.items()}
        for name, dist in sorted((space.random or {}).items()):
            if isinstance(dist, Choice):
                self.choices[name] = list(dist.values)
            elif isinstance(dist, IntRange):
                self.distributions[name] = IntDistribution(dist.low, dist.high)
            else:
                log = isinstance(dist, LogUniform)
                self.distributions[name] = FloatDistribution(dist.low, dist.high, log=log)
        for name, values in self.choices.items():
            self.distributions[name] = CategoricalDistribution(tuple(range(len(values))))
        self.distributions = dict(sorted(self.distributions.items()))

    def grid(self) -> dict[str, list[int]]:
        return {name: list(range(len(values))) for name, values in self.choices.items()}

    def to_optuna(self, parameters: dict[str, Any]) -> dict[str, Any]:
        """Optuna's params of stored parameters (one not in the space is left out)."""
        params = {}
        for name, value in parameters.items():
            if name in self.choices:
                if value in self.choices[name]:
                    params[name] = self.choices[name].index(value)
            elif name in self.distributions:
                params[name] = value
        return params

    def from_optuna(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            name: self.choices[name][value] if name in self.choices else value
            for name, value in sorted(params.items())
        }


# What a study's trial and a point of one take in memory, measured (the growth of the
# process's RSS as studies of 20,000 trials, and of 1,000 trials of 999 points, were built:
# 2,037 and 39 bytes).
TRIAL_BYTES = 2048
POINT_BYTES = 40


def _within(held: Mapping[Any, Any], stored: Mapping[Any, Any]) -> bool:
    """Whether every item of `held` is in `stored`, with the same value."""
    return all(key in stored and stored[key] == value for key, value in held.items())


def make_pruner(rule: EarlyStopping | None) -> BasePruner:
    """The Optuna pruner that carries out an early-stopping rule."""
    if rule is None:
        return NopPruner()
    if isinstance(rule, AshaStopping):
        return SuccessiveHalvingPruner(
            min_resource=rule.min_steps, reduction_factor=rule.reduction_factor
        )
    if isinstance(rule, HyperbandStopping):
        return HyperbandPruner(
            min_resource=rule.min_steps,
            max_resource=rule.max_steps,
            reduction_factor=rule.reduction_factor,
        )
    return MedianPruner(
        n_startup_trials=rule.min_trials,
        n_warmup_steps=rule.min_steps,
        n_min_trials=rule.min_trials,
    )


def trial_seed(seed: int, index: int) -> int:
    """The seed of trial `index`'s sampler (numpy takes seeds below 2**32)."""
    return random.Random(f"{seed}/{index}").getrandbits(32)


class SweepStudy:
    """A sweep's study in memory, with every stored trial in it (numbered by index)."""

    def __init__(
        self, *, sweep_id: int, spec: SweepCreate, seed: int, trials: Sequence[StoredTrial]
    ) -> None:
        self.sweep_id, self.spec, self.seed = sweep_id, spec, seed
        self.space = _Space(spec.space)
        self.storage = InMemoryStorage()
        name = f"sweep-{sweep_id}"  # HyperbandPruner's brackets hash it: the same each pass
        self.study = optuna.create_study(
            storage=self.storage,
            study_name=name,
            direction="maximize" if spec.objective.mode == "max" else "minimize",
            pruner=make_pruner(spec.early_stopping),
        )
        self._study_id = self.storage.get_study_id_from_name(name)
        self._grid = GridSampler(self.space.grid()) if spec.search_algorithm == "grid" else None
        self._random: RandomSampler | None = None  # reseeded for each trial (_sampler)
        self._ids: list[int] = []  # trial id by index
        self._points = 0  # held, all trials together (for `size`, kept as they are told)
        for trial in trials:
            self._add(trial)

    def _add(self, trial: StoredTrial) -> None:
        if trial.index != len(self._ids):
            raise ValueError(f"trial {trial.index} stored without trial {len(self._ids)}")
        params = self.space.to_optuna(trial.parameters)
        value = trial.value if trial.state is TrialState.COMPLETE else None
        frozen = create_trial(
            state=trial.state,
            value=value,
            params=params,
            distributions={name: self.space.distributions[name] for name in params},
            system_attrs=trial.system_attrs,
            intermediate_values=trial.points,
        )
        self._ids.append(self.storage.create_new_trial(self._study_id, template_trial=frozen))
        self._points += len(trial.points)

    def catch_up(self, *, spec: SweepCreate, seed: int, trials: Sequence[StoredTrial]) -> bool:
        """Bring this study up to `trials`, the sweep's as stored now, where it only lags
        them: the trials it holds as running may since have reported points, gained
        system attributes or ended, and new trials follow. True when it now holds exactly
        what a study built from `trials` would (services/sweeps/study_cache.py says why
        that is enough); False when it holds anything else (a trial asked in a pass that
        was rolled back, a spec changed): then it is half caught up and must be dropped.
        """
        if (spec, seed) != (self.spec, self.seed) or len(trials) < len(self._ids):
            return False
        held = self.study.get_trials(deepcopy=False)  # numbered by index, as _add makes them
        if len(held) != len(self._ids):
            return False  # an enqueued trial never asked
        for frozen, trial in zip(held, trials[: len(held)], strict=True):
            if not self._lags(frozen, trial):
                return False
        for trial in trials[len(held) :]:
            self._add(trial)
        if self._grid is not None:  # as new: its generator drawn from only past the grid
            self._grid = GridSampler(self.space.grid())
        return True

    def size(self) -> int:
        """About how many bytes the study holds: TRIAL_BYTES a trial, POINT_BYTES a point.
        Counted as they are added and told, not by walking the trials again."""
        return TRIAL_BYTES * len(self._ids) + POINT_BYTES * self._points

    def _lags(self, frozen: optuna.trial.FrozenTrial, trial: StoredTrial) -> bool:
        """Whether `frozen` is `trial` as it was before; if so, it is updated to it."""
        if frozen.params != self.space.to_optuna(trial.parameters):
            return False
        value = trial.value if trial.state is TrialState.COMPLETE else None
        if frozen.state.is_finished():
            told = (frozen.state, frozen.value, frozen.system_attrs, frozen.intermediate_values)
            return told == (trial.state, value, trial.system_attrs, trial.points)
        if frozen.state is not TrialState.RUNNING or not (
            _within(frozen.system_attrs, trial.system_attrs)
            and _within(frozen.intermediate_values, trial.points)
        ):
            return False
        # What came since, told now: its attributes and points first (a finished trial
        # takes no more), then its end.
        trial_id = self._ids[frozen.number]
        for key, attr in trial.system_attrs.items():
            if key not in frozen.system_attrs:
                self.storage.set_trial_system_attr(trial_id, key, attr)
        for step, point in trial.points.items():
            if step not in frozen.intermediate_values:
                self.storage.set_trial_intermediate_value(trial_id, step, point)
                self._points += 1
        if trial.state is not TrialState.RUNNING:
            self.storage.set_trial_state_values(
                trial_id, trial.state, None if value is None else [value]
            )
        return True

    def _sampler(self, index: int) -> BaseSampler:
        algorithm = self.spec.search_algorithm
        if self._grid is not None:
            return self._grid
        seed = trial_seed(self.seed, index)
        if algorithm == "tpe":
            # Trials run side by side: the running ones count as bad results meanwhile, so
            # TPE does not send the next trial next to them (Optuna's advice for parallel
            # workers).
            return TPESampler(seed=seed, constant_liar=self.spec.max_concurrent > 1)
        if algorithm == "cmaes":
            return CmaEsSampler(seed=seed, warn_independent_sampling=False)
        if self._random is None:
            self._random = RandomSampler(seed=seed)
        else:
            # The state a new RandomSampler(seed) has: its one RandomState seeded with
            # `seed`. A new sampler first seeds one from the OS's entropy (90 µs, as much
            # as the rest of an ask), then again with `seed`.
            self._random._rng.rng.seed(seed)
        return self._random

    def ask(
        self, index: int, fixed: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The parameters of new trial `index` and its Optuna system attributes.

        `fixed`: parameters decided before (enqueued, so the sampler leaves them as they
        are)."""
        if index != len(self._ids):
            raise ValueError(f"trial {index} asked after {len(self._ids)} trials")
        self.study.sampler = self._sampler(index)
        if fixed is not None:
            self.study.enqueue_trial(self.space.to_optuna(fixed))
        trial = self.study.ask(fixed_distributions=self.space.distributions)
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(
            self._study_id, trial.number
        )
        self._ids.append(trial_id)
        return self.space.from_optuna(trial.params), self.system_attrs(index)

    def should_stop(self, index: int) -> bool:
        """Whether the pruner stops running trial `index` at its last reported step."""
        return Trial(self.study, self._ids[index]).should_prune()

    def system_attrs(self, index: int) -> dict[str, Any]:
        return dict(self.storage.get_trial_system_attrs(self._ids[index]))
