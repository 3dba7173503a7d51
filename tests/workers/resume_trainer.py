"""The built-in `mlp_digits`, run by the exact-resume tests as `tests.workers.resume_trainer:train`.

Two hyperparameters only the tests set: `kill_at_step` (with `kill_replica`): on its
first attempt that replica sends itself SIGKILL at the end of that global step, before
its step-level backup of that step if one is due (an uncatchable death at an exact
step); `step_sleep`: seconds each step is made to last longer, so that a test's signal
lands mid-training. Neither changes what is trained.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import tf_keras as keras

from workers.replica.trainers import TrainerContext, mlp_digits


class _Killer(keras.callbacks.Callback):  # type: ignore[misc]
    def __init__(self, step: int) -> None:
        super().__init__()
        self.step = step
        self.epoch = 0

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self.epoch = epoch

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        if self.epoch * self.params["steps"] + batch + 1 == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class _Sleeper(keras.callbacks.Callback):  # type: ignore[misc]
    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        time.sleep(self.seconds)


def train(ctx: TrainerContext) -> dict[str, float]:
    hp = ctx.hyperparameters
    extra: list[Any] = []
    if hp.get("kill_at_step") and ctx.attempt == 1 and ctx.index == hp.get("kill_replica", 0):
        extra.append(_Killer(int(hp["kill_at_step"])))
    if hp.get("step_sleep"):
        extra.append(_Sleeper(float(hp["step_sleep"])))
    callbacks = ctx.callbacks
    ctx.callbacks = lambda global_batch=None: [*callbacks(global_batch), *extra]  # type: ignore[method-assign]
    return mlp_digits.train(ctx)
