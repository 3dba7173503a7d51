"""Gradient accumulation and step profiling checked in one TensorFlow process.

`python -m tests.workers.distribution_probe STRATEGY TB_DIR` (one_device, or mirrored
over two logical CPU devices) prints one JSON line: the largest weight difference
between 4 accumulated micro-steps of batch 16 and 1 step of batch 64, through Keras
`fit` (`accumulating`) and through a custom loop (`GradientAccumulator`), the
optimizer steps each took, and the tf.data shard policy `dataset_options` set. It
runs in its own process because the CPU split must precede TensorFlow's start.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

from services.wire.replica import DistributionOptions, Profile  # noqa: E402
from workers.replica import distribution  # noqa: E402
from workers.replica.profiling import StepProfiler  # noqa: E402

MICRO_BATCH, STEPS = 16, 4


def main(strategy_name: str, tensorboard_dir: Path) -> dict[str, Any]:
    distribution.configure_devices(DistributionOptions(cpu_devices=2))
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    if strategy_name == "mirrored":
        strategy = tf.distribute.MirroredStrategy(
            ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
        )
    else:
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(MICRO_BATCH * STEPS, 8)).astype(np.float32)
    y = rng.normal(size=(MICRO_BATCH * STEPS, 1)).astype(np.float32)

    def net() -> keras.Model:
        return keras.Sequential(
            [
                keras.layers.Input((8,)),
                keras.layers.Dense(4, activation="tanh"),
                keras.layers.Dense(1),
            ]
        )

    def gap(a: keras.Model, b: keras.Model | list[Any]) -> float:
        other = b if isinstance(b, list) else b.get_weights()
        return max(
            float(np.abs(wa - wb).max()) for wa, wb in zip(a.get_weights(), other, strict=True)
        )

    # Keras fit: 4 micro-batches of 16 through `accumulating` vs 1 batch of 64.
    with strategy.scope():
        small, big = net(), net()
        big.set_weights(small.get_weights())
        initial = small.get_weights()
        accumulating = distribution.accumulating(small, STEPS)
        accumulating.compile(keras.optimizers.Adam(0.05), "mse")
        big.compile(keras.optimizers.Adam(0.05), "mse")
    accumulating.fit(x, y, batch_size=MICRO_BATCH, shuffle=False, verbose=0)
    big.fit(x, y, batch_size=MICRO_BATCH * STEPS, shuffle=False, verbose=0)
    result: dict[str, Any] = {
        "fit_gap": gap(small, big),
        "fit_moved": gap(small, initial),
        "fit_optimizer_steps": int(accumulating.optimizer.iterations.numpy()),
    }

    # A custom loop: GradientAccumulator.step inside strategy.run, profiled.
    with strategy.scope():
        small, big = net(), net()
        big.set_weights(small.get_weights())
        small_opt, big_opt = keras.optimizers.Adam(0.05), keras.optimizers.Adam(0.05)
        accumulator = distribution.GradientAccumulator(small.trainable_variables, STEPS)

    def loss_of(model: keras.Model, features: Any, labels: Any, batch: int) -> Any:
        per_example = tf.reduce_mean(tf.square(model(features) - labels), axis=1)
        return tf.nn.compute_average_loss(per_example, global_batch_size=batch)

    @tf.function
    def micro_step(batch: Any, step: Any) -> None:
        def replica_step(features: Any, labels: Any) -> None:
            with tf.GradientTape() as tape:
                loss = loss_of(small, features, labels, MICRO_BATCH)
            accumulator.step(small_opt, tape.gradient(loss, small.trainable_variables), step)

        strategy.run(replica_step, args=batch)

    @tf.function
    def big_step(batch: Any) -> None:
        def replica_step(features: Any, labels: Any) -> None:
            with tf.GradientTape() as tape:
                loss = loss_of(big, features, labels, MICRO_BATCH * STEPS)
            grads = tape.gradient(loss, big.trainable_variables)
            big_opt.apply_gradients(zip(grads, big.trainable_variables, strict=True))

        strategy.run(replica_step, args=batch)

    def batches(size: int) -> Any:
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(size)
        return strategy.experimental_distribute_dataset(dataset)

    profiler = StepProfiler(Profile(first_step=2, last_step=3), tensorboard_dir)
    for step, batch in enumerate(batches(MICRO_BATCH), start=1):
        with profiler.step(step):
            micro_step(batch, tf.constant(step, tf.int64))
    for batch in batches(MICRO_BATCH * STEPS):
        big_step(batch)
    result["loop_gap"] = gap(small, big)
    result["loop_optimizer_steps"] = int(small_opt.iterations.numpy())
    result["profiles"] = sorted(
        str(p.relative_to(tensorboard_dir)) for p in tensorboard_dir.rglob("*.xplane.pb")
    )

    options = distribution.dataset_options(DistributionOptions(shard_policy="data"))
    result["shard_policy"] = options.experimental_distribute.auto_shard_policy.name

    # mixed_float16: compile wraps the optimizer in a LossScaleOptimizer, whose
    # scaled gradients the accumulating train step unscales before summing them.
    distribution.apply_precision(DistributionOptions(mixed_precision="mixed_float16"))
    with strategy.scope():
        small = net()
        accumulating = distribution.accumulating(small, STEPS)
        accumulating.compile(keras.optimizers.Adam(0.05), "mse")
    history = accumulating.fit(x, y, batch_size=MICRO_BATCH, epochs=2, shuffle=False, verbose=0)
    result["float16_optimizer"] = type(accumulating.optimizer).__name__
    result["float16_optimizer_steps"] = int(accumulating.optimizer.iterations.numpy())
    result["float16_losses"] = [float(loss) for loss in history.history["loss"]]
    return result


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], Path(sys.argv[2]))), flush=True)  # noqa: T201
