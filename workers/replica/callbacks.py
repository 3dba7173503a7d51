"""Replica-side training metrics: the tf_keras callback that feeds the replica's
`ReplicaReporter` (workers/replica/report_writer.py) from `model.fit`, and the replica's
status lines.
TensorFlow is imported only when the callback is first built, so this module can be
imported (and tested) without TensorFlow.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Mapping
from typing import Any

from workers.point_buffer import status_line, warn

# Replica code imports the reporter from here.
from workers.replica.report_writer import ReplicaReporter
from workers.step_records import StepRecord

__all__ = ["FINISH_GRACE", "ReplicaReporter", "announce", "metrics_callback", "warn"]


def announce(message: str) -> None:
    """Write one `cohort:` status line to stdout and flush it."""
    status_line(f"cohort: {message}", sys.stdout)


# After training, how long the replica may go without a beat (evaluation, saving).
FINISH_GRACE = 300.0


# Under ParameterServerStrategy, how many steps the chief may have in flight before
# it waits for the oldest one's figures: enough to keep every worker busy, few enough
# that step_time measures the workers' pace rather than how fast closures are queued.
COORDINATED_STEPS_IN_FLIGHT = 16


def metrics_callback(
    reporter: ReplicaReporter, global_batch_size: int, *, coordinated: bool = False
) -> Any:
    """The tf_keras callback reporting per-step, per-epoch and throughput metrics;
    `coordinated` for a ParameterServerStrategy chief, whose steps run on workers."""
    if coordinated:
        return _coordinated_callback_class()(reporter, global_batch_size)
    return _callback_class()(reporter, global_batch_size)


class _StepMetrics:
    """Feeds Keras logs plus step_time and examples_per_sec to a ReplicaReporter: the
    hooks of `MetricsCallback`, a tf_keras callback made by `_callback_class` (so that
    importing this module never loads TensorFlow).

    Per batch it only appends a `StepRecord` to the reporter's deque; the sender
    thread converts and writes (workers/point_buffer.py). It takes the logs as
    tensors (`_supports_tf_logs`), so when every batch-level callback does the
    same, Keras skips its per-batch `sync_to_numpy_or_python_type` of the logs
    and the values are read on the sender thread instead.
    """

    params: Any  # set by Keras (`set_params`)

    def __init__(self, reporter: ReplicaReporter, global_batch_size: int) -> None:
        super().__init__()
        self._supports_tf_logs = True
        self._reporter = reporter
        self._global_batch_size = global_batch_size
        self._steps_per_epoch: int | None = None
        self._epoch = 0
        self._seen = 0  # batches seen, for the global step when steps_per_epoch is unknown
        self._step = 0
        self._last_batch_end = time.perf_counter()
        self._announced = False
        self._record = reporter.step_recorder()

    def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
        self._steps_per_epoch = (self.params or {}).get("steps")

    def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._epoch = epoch
        # The first step of an epoch is timed from here, not from the previous
        # epoch's last step, so epoch-end work (checkpoints) does not count.
        self._last_batch_end = time.perf_counter()

    def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        # The training thread's whole per-step cost: keep it to a clock reading,
        # a little arithmetic and one deque append.
        now = time.perf_counter()
        self._record(
            StepRecord(
                self._step_of(batch),
                self._epoch,
                logs,
                "",
                now,
                now - self._last_batch_end,
                self._global_batch_size,
            )
        )
        self._last_batch_end = now
        if not self._announced:
            self._announce_first_step()

    def _announce_first_step(self) -> None:
        self._announced = True
        announce(f"first_step ts={time.time()}")

    def _step_of(self, batch: int) -> int:
        self._seen += 1
        if self._steps_per_epoch:
            # Derived from the epoch, not counted, so a run resumed by
            # BackupAndRestore continues the same step numbering.
            self._step = self._epoch * self._steps_per_epoch + batch + 1
        else:
            self._step = self._seen
        return self._step

    def _report_step(
        self, step: int, epoch: int, logs: Mapping[str, Any] | None, step_time: float
    ) -> None:
        self._record(
            StepRecord(
                step, epoch, logs, "", time.perf_counter(), step_time, self._global_batch_size
            )
        )
        if not self._announced:
            self._announce_first_step()

    def on_test_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
        # Evaluation is progress too, and makes no step records; rate-limited.
        self._reporter.beat()

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        self._record(
            StepRecord(
                self._step,
                epoch,
                logs,
                "epoch_",
                time.perf_counter(),
                None,
                self._global_batch_size,
            )
        )
        self._reporter.wake_sender()  # an epoch's figures are shown at once

    def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
        # Evaluation beats again; saving the model does not, so give it time.
        self._reporter.beat(extend=FINISH_GRACE)
        self._reporter.flush()


class _CoordinatedSteps(_StepMetrics):
    """The metrics of a ParameterServerStrategy chief (the hooks of
    `CoordinatedMetricsCallback`).

    Each step is a closure the coordinator schedules on some worker, and its logs
    are a RemoteValue; fetching it at once would wait for every step in turn.
    Step n is reported when its figures are fetched, as step n +
    COORDINATED_STEPS_IN_FLIGHT is scheduled, timed from the step fetched before
    it (the gang's pace: workers finish steps in parallel); the steps still in
    flight at the epoch's end share the time since the last one fetched.
    """

    _last_batch_end: float

    def __init__(self, reporter: ReplicaReporter, global_batch_size: int) -> None:
        # The base takes tf logs, which Keras requires of batch-level callbacks
        # under ParameterServerStrategy (the logs are RemoteValues there).
        super().__init__(reporter, global_batch_size)
        self._in_flight: list[tuple[int, int, Any]] = []

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._in_flight.append((self._step_of(batch), self._epoch, logs))
        while len(self._in_flight) > COORDINATED_STEPS_IN_FLIGHT:
            step, epoch, values = self._fetch(*self._in_flight.pop(0))
            now = time.perf_counter()
            step_time = now - self._last_batch_end
            self._last_batch_end = now
            if values is not _LOST:
                self._report_step(step, epoch, values, step_time)

    def on_epoch_end(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
        done = [self._fetch(*entry) for entry in self._in_flight]
        self._in_flight.clear()
        if done:
            share = (time.perf_counter() - self._last_batch_end) / len(done)
            for step, step_epoch, values in done:
                if values is not _LOST:
                    self._report_step(step, step_epoch, values, share)
        super().on_epoch_end(epoch, logs)

    @staticmethod
    def _fetch(step: int, epoch: int, logs: Any) -> tuple[int, int, Any]:
        fetch = getattr(logs, "fetch", None)
        if fetch is None:
            return step, epoch, logs
        try:
            return step, epoch, fetch()
        except Exception as error:  # noqa: BLE001 - TensorFlow's errors, sorted below
            # A step's figures stay on the worker that ran it until fetched. If
            # that worker is gone (killed, its node lost), the step itself is done
            # (its update is on the ps) and the coordinator goes on without the
            # worker; only these figures are lost. Raising here would fail the
            # chief, and with it the gang, over one step's loss.
            if not _worker_lost(error):
                raise
            announce(
                f"step {step}'s figures were lost with the worker that ran it: "
                f"{str(error).splitlines()[0][:200]}"
            )
            return step, epoch, _LOST


@functools.cache
def _callback_class() -> type:
    # Imported here so that importing this module never loads TensorFlow.
    import tf_keras as keras

    class MetricsCallback(_StepMetrics, keras.callbacks.Callback):  # type: ignore[misc]  # tf_keras has no types
        __doc__ = _StepMetrics.__doc__

    return MetricsCallback


@functools.cache
def _coordinated_callback_class() -> type:
    import tf_keras as keras

    class CoordinatedMetricsCallback(_CoordinatedSteps, keras.callbacks.Callback):  # type: ignore[misc]  # tf_keras has no types
        __doc__ = _CoordinatedSteps.__doc__

    return CoordinatedMetricsCallback


# The figures of a step whose worker was lost before they were fetched.
_LOST = object()


def _worker_lost(error: BaseException) -> bool:
    """Whether `error`, raised fetching a step's figures, says the worker holding them
    is unreachable: what TensorFlow's coordinator itself counts as a worker failure
    (unavailable, aborted or cancelled, naming a worker and no ps). A lost ps is not:
    the gang cannot go on without it."""
    import tensorflow as tf

    text = str(error)
    return (
        isinstance(
            error, (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError)
        )
        and "/job:worker" in text
        and "/job:ps" not in text
    )
