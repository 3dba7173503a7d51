"""`report()`: one JSON line per call in the file the agent follows ($COHORT_METRICS_FILE).

Each line is `{"step": int, "metrics": {name: float, ...}, "ts": unix time}` (plus
`"epoch": int` when Cohort's own runner writes it), or `{"beat": unix time}`: "this
replica is alive through then" (the runner's progress heartbeat, dated ahead while it
saves). This module owns the format: `check` for report(), `points_record` and
`encode_beat` for the runner (workers/replica/report_writer.py), `decode_line` for the
node agent (workers/node/report_shipper.py), which ships the points as this replica's
metrics and counts each line as progress for the hang watchdog. Replicas hold no Redis
credentials: this file is how every replica reports.

Standard library only: this module is imported inside the user's training process.
"""

from __future__ import annotations

import json
import math
import operator
import os
import time
import warnings
from typing import Any, NamedTuple, TypeGuard

from cohort import report_queue

ENV_VAR = "COHORT_METRICS_FILE"
# The bounds of the columns metrics are stored in (a point outside them is dropped later).
MAX_NAME = 64
MAX_STEP = 2**31 - 1

_warned = False


def report(step: int, **metrics: float) -> None:
    """Record `metrics` at training step `step` for this replica.

    Example: `report(120, loss=0.31, accuracy=0.9)`. Any replica may report; each
    replica's points are its own. Outside Cohort ($COHORT_METRICS_FILE unset) it
    does nothing but warn once, so the same script runs anywhere.

    The call checks its arguments and queues the point; a background thread writes it
    within FLUSH_SECONDS (cohort/report_queue.py), and at exit. A tensor's value is
    read there too, so the step does not wait for it: one that turns out not to be a
    single finite number is not recorded, said once on stderr.

    Raises:
        TypeError: `step` is not an integer, or a value is not a number.
        ValueError: `step` is negative or too large, a value is NaN or infinite,
            a name is too long, or no metric is given.
    """
    checked = check(step, metrics)
    path = os.environ.get(ENV_VAR)
    if not path:
        _warn_once()
        return
    report_queue.put((path, checked[0], checked[1], time.time()))


def flush() -> None:
    """Write every point reported so far now (report() does within FLUSH_SECONDS, and
    at a normal exit): before `os._exit`, say."""
    report_queue.flush()


def check(step: Any, metrics: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The step and the metrics as they will be written: numbers as floats, a tensor
    kept to be read on the writer's thread. TypeError or ValueError naming what is
    wrong (see report())."""
    if isinstance(step, bool):
        raise TypeError(f"report(): step must be an integer, not {step!r}")
    try:
        step = operator.index(step)  # int, numpy integers; never a float like 3.0
    except TypeError:
        raise TypeError(
            f"report(): step must be an integer (the training step), not {type(step).__name__}"
        ) from None
    if not 0 <= step <= MAX_STEP:
        raise ValueError(f"report(): step must be between 0 and {MAX_STEP}, not {step}")
    if not metrics:
        raise ValueError("report(): give at least one metric, e.g. report(step, loss=0.5)")
    return step, {name: _value(name, value) for name, value in metrics.items()}


def points_record(
    step: int, epoch: int | None, metrics: dict[str, float], ts: float
) -> dict[str, Any]:
    """The object of one line of points already checked (finite floats, short names);
    the runner serialises it with orjson, the same JSON, several times faster."""
    record: dict[str, Any] = {"step": step, "metrics": metrics, "ts": ts}
    if epoch is not None:
        record["epoch"] = epoch
    return record


def encode_beat(alive_until: float) -> bytes:
    """A progress heartbeat line: the replica is alive through `alive_until`."""
    return (json.dumps({"beat": alive_until}) + "\n").encode()


def _value(name: str, value: Any) -> Any:
    """A Python or NumPy number as a float, checked now; anything else that converts
    (a tensor of TensorFlow, PyTorch, JAX) as itself, read later."""
    if len(name) > MAX_NAME:
        raise ValueError(f"report(): metric name {name[:20]!r}... is longer than {MAX_NAME}")
    # Strings are refused even when they parse: a "0.5" is a bug at the caller.
    if isinstance(value, (str, bytes, bool)) or not hasattr(value, "__float__"):
        raise TypeError(
            f"report(): metric {name!r} must be a number, not {type(value).__name__} "
            f"{value!r:.40}; pass float(x) or a scalar tensor"
        )
    if isinstance(value, (int, float)) or type(value).__module__ == "numpy":
        return _number(name, value)  # cheap to read: its errors raised to the caller
    return value


def _number(name: str, value: Any) -> float:
    try:
        number = float(value)  # also a numpy scalar or a scalar tf tensor
    except (TypeError, ValueError) as exc:
        raise TypeError(f"report(): metric {name!r} must be a single number ({exc})") from None
    if not math.isfinite(number):
        raise ValueError(
            f"report(): metric {name!r} is {number}; only finite values can be reported"
        )
    return number


def _warn_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            f"cohort.report(): ${ENV_VAR} is not set (not running under Cohort); "
            "metrics are not recorded",
            RuntimeWarning,
            stacklevel=3,
        )


class Decoded(NamedTuple):
    """What one line says: its points `(step, name, value, ts, epoch)`, or a beat."""

    points: list[tuple[int, str, float, float, int | None]]
    beat: float | None = None


def decode_line(raw: bytes) -> Decoded:
    """The points (or the beat) of one line, checked as the agent must: the line was
    written by user code. ValueError saying what is wrong with it."""
    try:
        record = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise ValueError("not a JSON object")
    if "beat" in record:
        beat = record["beat"]
        if len(record) != 1 or not _is_finite(beat):
            raise ValueError(f'a beat is {{"beat": unix time}}, got {record!r:.60}')
        return Decoded([], float(beat))
    step, metrics, ts = record.get("step"), record.get("metrics"), record.get("ts", time.time())
    epoch = record.get("epoch")
    if not _is_int(step) or not 0 <= step <= MAX_STEP:
        raise ValueError(f"step must be an integer in 0..{MAX_STEP}, got {step!r:.40}")
    if epoch is not None and (not _is_int(epoch) or not 0 <= epoch <= MAX_STEP):
        raise ValueError(f"epoch must be an integer in 0..{MAX_STEP}, got {epoch!r:.40}")
    if not isinstance(metrics, dict) or not metrics:
        raise ValueError("metrics must be a non-empty object")
    if not _is_finite(ts):
        raise ValueError(f"ts must be a finite number, got {ts!r:.40}")
    points: list[tuple[int, str, float, float, int | None]] = []
    for name, value in metrics.items():
        if not (0 < len(name) <= MAX_NAME and "\x00" not in name):
            raise ValueError(f"metric name {name[:20]!r} is empty or longer than {MAX_NAME}")
        if not _is_finite(value):
            raise ValueError(f"metric {name!r} is not a finite number: {value!r:.40}")
        points.append((step, name, float(value), float(ts), epoch))
    return Decoded(points)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
