"""A plain MultiWorkerMirroredStrategy training script: no Cohort code at all.

The hand side (H) of bench/overhead.py. It builds exactly what Cohort's built-in
`mlp_digits` builds (workers/replica/trainers/mlp_digits.py): the same digits split, each
worker's rows `x[index::replicas]`, the same shuffle/repeat/global batch, the same MLP,
optimizer, loss and reduction, `fit` with no callbacks of its own and verbose=0. It
imports only TensorFlow, tf_keras, NumPy and scikit-learn (the data).

The same file is Cohort's side (C): `train(ctx)` runs the very same `run()` with the
strategy Cohort built and `ctx.callbacks()` added, submitted as the trainer
`plain_mlp:train` of a bundle holding this file. What differs between H and C is then
exactly what Cohort adds: its launch path, its runner, and its callbacks per step.

How it is timed, identically on both sides, with nothing per step on either:

* first step: the wall time when the model's first `train_function` call returns,
  caught by wrapping that function once; the wrapper puts the original back after the
  first step, so steps 2.. run unwrapped (`fit` looks it up on the model every step).
* steady step: (end of the last epoch - start of epoch 2) / its steps, from a callback
  with epoch hooks only: Keras calls batch hooks only if some callback has them, so it
  adds nothing per step (epoch 1 holds tracing and the gang's warm-up).

The same file run as a `command` job (`python plain_mlp.py --out -`, TF_CONFIG from
Cohort) prints its timings instead: Cohort's whole path with no Cohort code in the
process, handed to a warm process where the node keeps them.

By hand (bench/overhead.py does this for each of the two workers):

    TF_CONFIG='{"cluster": {"worker": [...]}, "task": {"type": "worker", "index": 0}}' \\
        TF_USE_LEGACY_KERAS=1 python bench/plain_mlp.py --out timing-0.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

HP: dict[str, Any] = {
    "epochs": 3,
    "steps_per_epoch": 50,
    "batch_size": 32,
    "learning_rate": 0.01,
    "hidden_units": 64,
    "seed": 0,
}


def run(
    strategy: Any, index: int, replicas: int, hp: dict[str, Any], callbacks: list[Any]
) -> dict[str, float]:
    """Train the digits MLP under `strategy` as worker `index` of `replicas`; the
    timings (unix first-step time, seconds per steady step) and the final loss."""
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    epochs, steps, seed = int(hp["epochs"]), int(hp["steps_per_epoch"]), int(hp["seed"])
    keras.utils.set_random_seed(seed)
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    x_train, _x_test, y_train, _y_test = train_test_split(
        x, y, test_size=0.2, random_state=seed, stratify=y
    )
    x_train, y_train = x_train[index::replicas], y_train[index::replicas]
    global_batch = int(hp["batch_size"]) * strategy.num_replicas_in_sync
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .shuffle(len(x_train), seed=seed)
        .repeat()
        .batch(global_batch)
        .with_options(options)
    )
    units = int(hp["hidden_units"])
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.layers.Input(shape=(64,)),
                keras.layers.Dense(units, activation="relu"),
                keras.layers.Dense(max(units // 2, 1), activation="relu"),
                keras.layers.Dense(10, dtype="float32"),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(learning_rate=float(hp["learning_rate"])),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        model.distribute_reduction_method = "first"

    first_step: list[float] = []
    traced = model.make_train_function()

    def first(iterator: Any) -> Any:
        logs = traced(iterator)
        first_step.append(time.time())
        model.train_function = traced  # steps 2.. call the function itself
        return logs

    model.train_function = first
    epoch_clock = EpochClock()
    history = model.fit(
        dataset,
        epochs=epochs,
        steps_per_epoch=steps,
        callbacks=[*callbacks, epoch_clock.callback()],
        verbose=0,
    )
    steady = epoch_clock.steady_step(steps)
    return {
        "bench_first_step": first_step[0],
        "bench_train_end": time.time(),  # fit returned
        "bench_steady_step": steady,
        "bench_loss": float(history.history["loss"][-1]),
    }


class EpochClock:
    """Perf-counter times of each epoch's start and end, by epoch hooks only."""

    def __init__(self) -> None:
        self.begins: list[float] = []
        self.ends: list[float] = []

    def callback(self) -> Any:
        import tf_keras as keras

        return keras.callbacks.LambdaCallback(
            on_epoch_begin=lambda _epoch, _logs: self.begins.append(time.perf_counter()),
            on_epoch_end=lambda _epoch, _logs: self.ends.append(time.perf_counter()),
        )

    def steady_step(self, steps: int) -> float:
        """Seconds per step over epochs 2..last (all of them with a single epoch)."""
        start = self.begins[1] if len(self.begins) > 1 else self.begins[0]
        epochs = len(self.ends) - (1 if len(self.begins) > 1 else 0)
        return (self.ends[-1] - start) / (epochs * steps)


def train(ctx: Any) -> dict[str, float]:
    """Cohort's side: the same run with Cohort's strategy and callbacks."""
    hp = {**HP, **ctx.hyperparameters}
    global_batch = int(hp["batch_size"]) * ctx.strategy.num_replicas_in_sync
    return run(ctx.strategy, ctx.index, ctx.replicas, hp, ctx.callbacks(global_batch))


def train_quiet(ctx: Any) -> dict[str, float]:
    """The trainer side without Cohort's callbacks (bench/overhead.py's side Q): no metric
    point per step, so that what the points cost shows beside side T."""
    hp = {**HP, **ctx.hyperparameters}
    return run(ctx.strategy, ctx.index, ctx.replicas, hp, [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", required=True, help="where to write the timings (JSON); -: print them"
    )
    parser.add_argument("--epochs", type=int, default=HP["epochs"])
    parser.add_argument("--steps", type=int, default=HP["steps_per_epoch"])
    args = parser.parse_args()
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])
    replicas, index = len(task["cluster"]["worker"]), int(task["task"]["index"])
    result = run(
        strategy, index, replicas, {**HP, "epochs": args.epochs, "steps_per_epoch": args.steps}, []
    )
    if args.out == "-":  # a `command` job of Cohort (bench/overhead.py reads its log)
        print("BENCH_TIMING " + json.dumps(result), flush=True)
        return
    with open(args.out, "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main()
