"""The sweeps' studies a scheduler keeps between its passes, so that a pass does not build
each one anew from every trial the sweep has had.

A pass reads each sweep's trials from the tables as before (services/sweeps/history.py),
then takes the study kept for the sweep and catches it up with them
(`SweepStudy.catch_up`): the trials it asked or held as running may since have reported
points, gained system attributes or ended; new trials follow. That is all a study of the
same spec and seed can lag behind by. Anything else — a trial the study asked in a pass
that was rolled back (a second scheduler took over, a check refused it), a trial whose
stored parameters, state or points are not what the study holds — and the study is built
from the rows, as every pass did before. So a study used is always the one the rows
would build (tests/services/test_sweep_study_cache.py checks a kept study and a new one
ask the same), and the rows stay the only state another scheduler needs.

Building costs Optuna a new study and a deep copy of every trial, which a pass creating
trials for 100 sweeps paid 100 times (docs/benchmarks.md, "A pass in which 100 sweeps
each create a trial" has the figures).

A study is handed to one pass at a time (taken out while it is used). Studies are kept by
sweep and by whether they hold the objective's points (the pruner's do; most samplers'
do not). What they hold is bounded, not their number: a judging study of a large sweep
holds every trial's points (1,000 trials of 1,000 steps, about 40 MB). Past CAPACITY
bytes, as `SweepStudy.size` reckons them (about 2 kB a trial, 40 bytes a point), the
least recently used studies are dropped; a study larger than that alone is not kept.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from cachetools import LRUCache

from services.sweeps.schemas import SweepCreate
from services.sweeps.study import StoredTrial, SweepStudy

# Bytes, all kept studies together: 128 sweeps of 1,000 trials, or 13,000 of 10 trials.
CAPACITY = 256 * 2**20

_Key = tuple[int, bool]


def _bounded() -> LRUCache[_Key, SweepStudy]:
    return LRUCache(maxsize=CAPACITY, getsizeof=SweepStudy.size)


_kept = _bounded()
_lock = threading.Lock()  # a pass's threads may share the module (cachetools has no lock)


def study_for(
    *,
    sweep_id: int,
    spec: SweepCreate,
    seed: int,
    trials: Sequence[StoredTrial],
    with_points: bool,
) -> SweepStudy:
    """The sweep's study holding exactly `trials`: the one kept, caught up, or a new one.
    It is kept again for the next pass once `keep` hands it back."""
    with _lock:
        study = _kept.pop((sweep_id, with_points), None)
    if study is not None and study.catch_up(spec=spec, seed=seed, trials=trials):
        return study
    return SweepStudy(sweep_id=sweep_id, spec=spec, seed=seed, trials=trials)


def keep(study: SweepStudy, *, with_points: bool) -> None:
    """Keep `study` for the sweep's next pass (after it asked or judged in this one)."""
    key = (study.sweep_id, with_points)
    with _lock:
        _kept.pop(key, None)
        try:
            _kept[key] = study  # its size weighed now: it grew in the pass
        except ValueError:  # larger than CAPACITY alone: not kept
            pass


def forget() -> None:
    """Drop every kept study: the next pass builds them all (as a new scheduler would).
    The bound is CAPACITY as it is now."""
    global _kept
    with _lock:
        _kept = _bounded()
