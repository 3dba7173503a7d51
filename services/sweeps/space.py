"""The parameters of trial i of a search space: a pure function of (space, seed, i).

Pure and per-index, so a trial's parameters need no stored list (the scheduler pass
creates trial i when its turn comes; the API recomputes them for display), and the
same seed gives the same parameters on any machine and in any order of creation.

- grid: the combinations in `itertools.product` order over the parameters as given
  (the last one varies fastest);
- random: each trial draws from its own generator, seeded with "<seed>/<i>", the
  parameters in name order.
"""

from __future__ import annotations

import math
import random
from typing import Any

from services.sweeps.schemas import Choice, IntRange, LogUniform, SearchSpace, Uniform

# Parameters that set a field of the trial's job rather than a hyperparameter.
JOB_FIELDS = ("replicas", "gpus_per_replica", "strategy")


def grid_size(space: SearchSpace) -> int:
    """How many combinations a grid has (0 for a random space)."""
    if not space.grid:
        return 0
    return math.prod(len(values) for values in space.grid.values())


def _grid_point(grid: dict[str, list[Any]], index: int) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name, values in reversed(list(grid.items())):
        index, pick = divmod(index, len(values))
        params[name] = values[pick]
    return {name: params[name] for name in grid}


def _draw(dist: Uniform | LogUniform | IntRange | Choice, rng: random.Random) -> Any:
    if isinstance(dist, Uniform):
        return rng.uniform(dist.low, dist.high)
    if isinstance(dist, LogUniform):
        return math.exp(rng.uniform(math.log(dist.low), math.log(dist.high)))
    if isinstance(dist, IntRange):
        return rng.randint(dist.low, dist.high)
    return dist.values[rng.randrange(len(dist.values))]


def trial_parameters(space: SearchSpace, seed: int, index: int) -> dict[str, Any]:
    """The parameters of trial `index` (0-based)."""
    if space.grid:
        return _grid_point(space.grid, index)
    rng = random.Random(f"{seed}/{index}")
    dists = space.random or {}
    return {name: _draw(dists[name], rng) for name in sorted(dists)}


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
    """A fresh seed for a random space that named none (stored with the sweep)."""
    return random.SystemRandom().randrange(2**31)
