"""A replica's per-step records: what the training thread hands over (`StepRecord`), and
which of them become metric points, above a rate per replica (`StepSampler`).

Cohort's callbacks record every step (workers/replica/callbacks.py); every point costs
the whole stack something (the agent's read, Redis, the leader's ingest, a row and its
index entries in SQL), and a small model steps a hundred times a second or more. So past
`per_second` steps a second, a replica ships one step in `stride`:

* an attempt's first steps every one (its first step always; at most `WINDOW_STEPS`
  of them, within `WINDOW` seconds), which also measure the pace: `stride` is then fixed
  for the attempt, the power of two at or above the steps a second there over
  `per_second`, and the steps kept are its multiples. So every later point stands for
  as many steps as the next (a mean over points is a mean over steps), and runs of one
  model at a like pace (a sweep's trials, whose early stopping compares them at the
  same steps) keep the same steps, a run with a stride twice another's every other one
  of its steps;
* a kept step's `step_time` is the mean over the steps it stands for (the skipped ones
  and itself), so `examples_per_sec` (its examples over that mean) and the scaling
  report's throughput count every step's time; its other figures (loss, accuracy) are
  the step's own, Keras's running means over the epoch;
* each epoch's last step is kept (released before the epoch's own record, standing for
  the steps since the last kept one), and so is the last step before an explicit flush
  (the end of training, a drain's SIGTERM), so the step a checkpoint saved is shown.

What is skipped is never converted: the records hold the logs as Keras gave them (tensors
under `_supports_tf_logs`), read only for the steps kept. `per_second` 0 keeps every step.
A `cohort.report()` of the user's own is not a step record and is never sampled.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

# Every step at an attempt's start, for at most WINDOW seconds and WINDOW_STEPS steps: the
# pace there sets the stride. Bounded in steps too, so that a model that steps a thousand
# times a second ships no thousand steps before its stride is known.
WINDOW = 1.0
WINDOW_STEPS = 50


class StepRecord(NamedTuple):
    """One step (or epoch end) as the training thread hands it over, converted later.

    `logs` is the mapping Keras passed (numpy values, or tensors when the callback takes
    tf logs), never copied: Keras builds a new one per step and mutates none it passed.
    `clock` is `time.perf_counter()` at the step's end (the point's ts is derived from
    it when converted); `step_time` None for records with no timing (epoch ends);
    `examples` the global batch, for examples_per_sec.
    """

    step: int
    epoch: int | None
    logs: Mapping[str, Any] | None
    prefix: str  # put before every log name: "" for a step, "epoch_" for an epoch end
    clock: float
    step_time: float | None
    examples: int


class StepSampler:
    """One replica's choice of the step records to keep (the sender thread's alone)."""

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self.stride = 1
        self._first: float | None = None  # the first step's clock
        self._last = 0.0  # the window's newest step's clock
        self._window_steps = 0
        self._fixed = per_second <= 0  # 0: every step, stride 1 for good
        self._held: StepRecord | None = None  # the newest step not kept (yet)
        self._count = 0  # steps since the last kept one, the held one included
        self._time = 0.0  # their step times

    def take(self, record: StepRecord) -> list[StepRecord]:
        """The records to turn into points now, in order, for the next `record`."""
        if record.prefix or record.step_time is None:  # an epoch's end: its last step first
            return [*self.release(), record]
        if self._fixed and self.stride == 1:
            return [record]
        if self._first is None:
            self._first = record.clock
        if not self._fixed:
            if self._window_steps < WINDOW_STEPS and record.clock <= self._first + WINDOW:
                self._window_steps += 1
                self._last = record.clock
                return [record]
            self._fixed = True
            # Steps a second after the first (which traces the graph), over those wanted.
            elapsed = self._last - self._first
            wanted = (self._window_steps - 1) / elapsed / self.per_second if elapsed > 0 else 0
            self.stride = 1 << math.ceil(math.log2(wanted)) if wanted > 1 else 1
        self._count += 1
        self._time += record.step_time
        if record.step % self.stride:
            self._held = record
            return []
        return [self._kept(record)]

    def release(self) -> list[StepRecord]:
        """The held step, standing for the steps since the last kept one (at an epoch's
        end, or a flush that must show the newest step)."""
        held = self._held
        return [] if held is None else [self._kept(held)]

    def _kept(self, record: StepRecord) -> StepRecord:
        mean = self._time / self._count
        self._held, self._count, self._time = None, 0, 0.0
        return record._replace(step_time=mean)
