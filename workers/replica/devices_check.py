"""A replica given GPUs trains on them, or fails at once saying why.

TensorFlow falls back to the CPU without a word when it sees no GPU (a build without
CUDA, CUDA libraries missing, a driver too old): the job would run, slowly, on a node
that was chosen for its GPUs. The runner checks before building the strategy.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# sysexits' EX_CONFIG: the node, not the program, is at fault. Below 128 and not a
# retry code, so permanent (services/exit_codes.py): another attempt on the same node
# would fail the same way.
EXIT_NO_GPU = 78


def given_gpus(environ: Mapping[str, str]) -> list[str]:
    """The GPU ids the agent gave this replica (CUDA_VISIBLE_DEVICES), none if empty."""
    return [d.strip() for d in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]


def missing_gpus(given: Sequence[str], seen: int) -> str | None:
    """Why a replica given `given` GPUs, of which TensorFlow sees `seen`, must not run."""
    if seen >= len(given):
        return None
    return (
        f"this replica was given GPU {','.join(given)} but TensorFlow sees "
        f"{seen} of {len(given)} (a TensorFlow without CUDA support, CUDA libraries "
        "missing, or a driver too old for them): not training on the CPU instead. "
        "Install cohort[gpu] on the node, or run the job without gpus_per_replica"
    )


def _tensorflow_gpus() -> list[Any]:
    import tensorflow as tf

    return list(tf.config.list_physical_devices("GPU"))


def require_given_gpus(
    environ: Mapping[str, str] = os.environ, list_gpus: Callable[[], list[Any]] = _tensorflow_gpus
) -> None:
    """Return if this replica was given no GPU or TensorFlow sees every one it was given.

    Raises:
        SystemExit: EXIT_NO_GPU, after one line on stderr saying why (the job's reason).
    """
    given = given_gpus(environ)
    if not given:
        return
    problem = missing_gpus(given, len(list_gpus()))
    if problem is not None:
        print(f"cohort: {problem}", file=sys.stderr, flush=True)  # noqa: T201 - the log
        raise SystemExit(EXIT_NO_GPU)
