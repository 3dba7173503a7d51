"""A TensorBoard profile of steps first..last of a replica (the job's `profile:`).

`tf.profiler.experimental` writes the trace to
`<tensorboard_dir>/plugins/profile/<run>/<host>.xplane.pb`, which TensorBoard's
Profile tab reads (`tensorboard --logdir <tensorboard_dir>`; the tab itself needs the
`tensorboard-plugin-profile` package on the machine that views it, not here). The
node agent uploads the replica's TensorBoard directory with the job's artifacts.

`StepProfiler` is the one place that starts and stops the profiler: Keras `fit`
gets it as a callback (`profiler_callback`, part of `ctx.callbacks()`), a custom loop
wraps each step in `profiler.step(n)`. Steps are numbered from 1, like the metrics.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from services.wire.replica import Profile
from workers.replica.callbacks import announce, warn


class StepProfiler:
    """Profiles the steps of `profile` (None: profiles nothing) into `logdir`."""

    def __init__(self, profile: Profile | None, logdir: Path) -> None:
        self.profile = profile
        self.logdir = logdir
        self.active = False
        self.done = profile is None

    def begin(self, step: int) -> None:
        """Call before step `step` runs; starts the profiler at the first profiled step."""
        profile = self.profile
        if self.done or self.active or profile is None:
            return
        if profile.first_step <= step <= profile.last_step:
            import tensorflow as tf

            try:
                tf.profiler.experimental.start(str(self.logdir))
            except Exception as exc:  # noqa: BLE001 - a profile is never worth the job
                warn(f"the profiler did not start: {exc}")
                self.done = True
                return
            self.active = True
            announce(f"profiling steps {step}..{profile.last_step} into {self.logdir}")

    def end(self, step: int) -> None:
        """Call after step `step` ran; stops the profiler after the last profiled step."""
        if self.active and self.profile is not None and step >= self.profile.last_step:
            self.close()

    def close(self) -> None:
        """Stop and write the profile if it is running (training ended early)."""
        if not self.active:
            return
        import tensorflow as tf

        self.active, self.done = False, True
        try:
            tf.profiler.experimental.stop()
        except Exception as exc:  # noqa: BLE001
            warn(f"the profile could not be written: {exc}")
            return
        announce(f"profile written under {self.logdir / 'plugins' / 'profile'}")

    @contextlib.contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Wrap one step of a custom loop: `with profiler.step(n): train_step(...)`."""
        self.begin(step)
        if self.active:
            import tensorflow as tf

            with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
                yield
        else:
            yield
        self.end(step)


def profiler_callback(profiler: StepProfiler) -> Any:
    """A tf_keras callback driving `profiler` from `model.fit`'s batches (Keras
    marks each step in the trace itself)."""
    return _callback_class()(profiler)


@functools.cache
def _callback_class() -> type:
    import tf_keras as keras

    class ProfilerCallback(keras.callbacks.Callback):  # type: ignore[misc]  # tf_keras has no types
        def __init__(self, profiler: StepProfiler) -> None:
            super().__init__()
            self._profiler = profiler
            self._steps_per_epoch: int | None = None
            self._epoch = 0
            self._seen = 0

        def on_train_begin(self, logs: Mapping[str, Any] | None = None) -> None:
            self._steps_per_epoch = (self.params or {}).get("steps")

        def on_epoch_begin(self, epoch: int, logs: Mapping[str, Any] | None = None) -> None:
            self._epoch = epoch

        def _step(self, batch: int) -> int:
            # Numbered as the metrics callback numbers them (workers/replica/callbacks.py).
            if self._steps_per_epoch:
                return self._epoch * self._steps_per_epoch + batch + 1
            return self._seen + 1

        def on_train_batch_begin(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
            self._profiler.begin(self._step(batch))

        def on_train_batch_end(self, batch: int, logs: Mapping[str, Any] | None = None) -> None:
            step = self._step(batch)
            self._seen += 1
            self._profiler.end(step)

        def on_train_end(self, logs: Mapping[str, Any] | None = None) -> None:
            self._profiler.close()

    return ProfilerCallback
