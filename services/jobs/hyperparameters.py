"""Bounds on a job's hyperparameters: their shape (encoded size, keys, nesting depth), the
length of the run, and the knobs that size the built-in trainers' models.

A job's hyperparameters are any JSON its code reads; unbounded, one spec could hold
megabytes that every read of the job returns, or ask a built-in trainer for a layer of a
trillion units. Each refusal names the field and the range allowed.
"""

from __future__ import annotations

from typing import Any

from services.exceptions import InvalidJobSpec
from services.jobs.trainers import BUILTIN_TRAINERS
from services.settings import Settings

# epochs x steps_per_epoch: a hundred million steps is days of the largest built-in run.
MAX_TOTAL_STEPS = 100_000_000

# Knobs every built-in trainer reads: name -> the whole numbers it may take (both ends in).
COMMON_KNOBS: dict[str, tuple[int, int]] = {
    "seed": (0, 2**32 - 1),  # NumPy's and TensorFlow's seeds are 32-bit
    "checkpoint_every_steps": (0, MAX_TOTAL_STEPS),
}
# Knobs that size each built-in trainer's model.
MODEL_KNOBS: dict[str, dict[str, tuple[int, int]]] = {
    "mlp_digits": {"hidden_units": (1, 4096)},
    "cnn_digits": {"filters": (1, 256)},
}
assert set(MODEL_KNOBS) == set(BUILTIN_TRAINERS), "every built-in trainer has its bounds"


def _shape(value: dict[str, Any]) -> tuple[int, int]:
    """(keys at every depth, nesting depth) of a JSON object; a loop, not recursion."""
    keys, depth = 0, 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            keys += len(item)
            depth = max(depth, level)
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            depth = max(depth, level)
            stack.extend((v, level + 1) for v in item)
    return keys, depth


def _check_shape(hyperparameters: dict[str, Any], encoded: int, settings: Settings) -> None:
    if encoded > settings.MAX_HYPERPARAMETERS_BYTES:
        raise InvalidJobSpec(
            "hyperparameters",
            f"{encoded} bytes encoded, over the limit of "
            f"{settings.MAX_HYPERPARAMETERS_BYTES} (COHORT_MAX_HYPERPARAMETERS_BYTES): put "
            "large data in the bundle or the artifact store and pass its path",
        )
    keys, depth = _shape(hyperparameters)
    if keys > settings.MAX_HYPERPARAMETERS_KEYS:
        raise InvalidJobSpec(
            "hyperparameters",
            f"{keys} keys (counting nested objects' too), over the limit "
            f"of {settings.MAX_HYPERPARAMETERS_KEYS} (COHORT_MAX_HYPERPARAMETERS_KEYS): put "
            "large configurations in a file of the bundle or the project's data",
        )
    if depth > settings.MAX_HYPERPARAMETERS_DEPTH:
        raise InvalidJobSpec(
            "hyperparameters",
            f"nested {depth} levels deep (objects and lists), over the "
            f"limit of {settings.MAX_HYPERPARAMETERS_DEPTH} "
            "(COHORT_MAX_HYPERPARAMETERS_DEPTH): flatten it",
        )


def _check_knob(name: str, value: Any, low: int, high: int, trainer: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidJobSpec(
            f"hyperparameters.{name}",
            f"{trainer} takes a whole number from {low} to {high}; got {value!r}",
        )


def check_hyperparameters(
    *, hyperparameters: dict[str, Any], encoded: int, trainer: str | None, settings: Settings
) -> None:
    """Refuse hyperparameters past the bounds above (InvalidJobSpec naming the field).

    `hyperparameters` as they will be stored (JSON types), `encoded` their size in bytes;
    `trainer` the job's (its model knobs are checked when it is a built-in).
    """
    _check_shape(hyperparameters, encoded, settings)
    steps = hyperparameters.get("epochs", 1) * hyperparameters.get("steps_per_epoch", 1)
    if steps > MAX_TOTAL_STEPS:
        raise InvalidJobSpec(
            "hyperparameters.steps_per_epoch",
            f"epochs x steps_per_epoch is {steps:,} "
            f"training steps, over the limit of {MAX_TOTAL_STEPS:,}: ask for fewer",
        )
    if trainer in MODEL_KNOBS:
        for name, (low, high) in (COMMON_KNOBS | MODEL_KNOBS[trainer]).items():
            if name in hyperparameters:
                _check_knob(name, hyperparameters[name], low, high, trainer)
