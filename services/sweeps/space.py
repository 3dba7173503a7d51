"""The search space apart from Optuna: its size, the points checked before a sweep is
stored, and a trial's job spec from its parameters (pure).

Optuna chooses each trial's parameters when the scheduler pass creates it
(services/sweeps/study.py); they are stored with the trial (`SweepTrial`). So a sweep is
checked up front on points that bound what any trial can get:

- grid: every combination, in `itertools.product` order over the parameters as given;
- sampled: for each parameter, each of its ends (low and high, or every choice), the
  others at their low end or first choice. A trial job refuses a parameter by its range
  or type, which a trial's interior value shares with the ends; one refused all the same
  (a limit changed since) fails the sweep when its turn comes, saying which trial.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from typing import Any

from services.sweeps.schemas import Choice, Distribution, SearchSpace

# Parameters that set a field of the trial's job rather than a hyperparameter.
JOB_FIELDS = ("replicas", "gpus_per_replica", "strategy")


def grid_size(space: SearchSpace) -> int:
    """How many combinations a grid has (0 for a sampled space)."""
    if not space.grid:
        return 0
    return math.prod(len(values) for values in space.grid.values())


def grid_points(grid: dict[str, list[Any]]) -> Iterator[dict[str, Any]]:
    """Every combination of a grid, the last parameter varying fastest."""
    names = list(grid)
    for values in itertools.product(*grid.values()):
        yield dict(zip(names, values, strict=True))


def _ends(dist: Distribution) -> list[Any]:
    return list(dist.values) if isinstance(dist, Choice) else [dist.low, dist.high]


def probe_count(space: SearchSpace) -> int:
    """How many parameter sets `probe_points` gives."""
    if space.grid:
        return grid_size(space)
    return 1 + sum(len(_ends(dist)) - 1 for dist in (space.random or {}).values())


def probe_points(space: SearchSpace) -> Iterator[dict[str, Any]]:
    """The parameter sets a sweep is checked on before it is stored (module docstring)."""
    if space.grid:
        yield from grid_points(space.grid)
        return
    dists = space.random or {}
    base = {name: _ends(dists[name])[0] for name in sorted(dists)}
    yield base
    for name in sorted(dists):
        for end in _ends(dists[name])[1:]:
            yield {**base, name: end}


def trial_spec(template: dict[str, Any], params: dict[str, Any], name: str) -> dict[str, Any]:
    """The JobCreate dict of a trial: the template with its parameters merged in."""
    spec = {**template, "name": name}
    spec["hyperparameters"] = {
        **template.get("hyperparameters", {}),
        **{k: v for k, v in params.items() if k not in JOB_FIELDS},
    }
    spec.update({k: v for k, v in params.items() if k in JOB_FIELDS})
    return spec


def draw_seed() -> int:
    """A fresh seed for a sampled space that named none (stored with the sweep)."""
    return random.SystemRandom().randrange(2**31)
