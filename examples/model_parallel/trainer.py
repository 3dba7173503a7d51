"""Model parallelism inside one replica: the layers of one model on two devices.

Run as `trainer: "trainer:train"` from a code bundle, with `distribution:
{devices_per_replica: 2}` (and, on a machine without GPUs, `cpu_devices: 2`, which
splits the CPU into two logical devices). `ctx.devices` lists the replica's devices;
the model places its first half on one and its second half on the other with
`tf.device`, so TensorFlow copies the activations between them at the cut.

Each device holds only its own layers' weights: this is how a model too large for one
device is trained. It is not data parallelism, so the model is built under the default
strategy (not `ctx.strategy.scope()`, which would put every variable on one device).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras as keras
from sklearn.datasets import load_digits

DEFAULTS: dict[str, Any] = {
    "epochs": 3,
    "steps_per_epoch": 20,
    "batch_size": 32,
    "learning_rate": 0.01,
}


class TwoDeviceMLP(keras.Model):
    """A dense layer on `devices[0]`, the rest on `devices[1]`."""

    def __init__(self, devices: list[str]) -> None:
        super().__init__()
        self.devices = devices
        self.bottom = keras.layers.Dense(128, activation="relu")
        self.top = keras.Sequential(
            [keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)]
        )

    def call(self, inputs: tf.Tensor) -> tf.Tensor:
        # Layers create their weights on first call, under the device in effect.
        with tf.device(self.devices[0]):
            hidden = self.bottom(inputs)
        with tf.device(self.devices[1]):
            return self.top(hidden)


def train(ctx: Any) -> dict[str, float]:
    hp = {**DEFAULTS, **ctx.hyperparameters}
    devices = ctx.devices  # e.g. ['/device:CPU:0', '/device:CPU:1']
    if len(devices) < 2:
        raise RuntimeError(f"this example needs devices_per_replica >= 2, got {devices}")
    digits = load_digits()
    x, y = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int32)
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=0)
        .repeat()
        .batch(int(hp["batch_size"]))
    )

    model = TwoDeviceMLP(devices[:2])
    model.compile(
        optimizer=keras.optimizers.Adam(float(hp["learning_rate"])),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.fit(
        dataset,
        epochs=int(hp["epochs"]),
        steps_per_epoch=int(hp["steps_per_epoch"]),
        callbacks=ctx.callbacks(int(hp["batch_size"])),
        verbose=2,
    )
    for variable in model.trainable_variables:
        print(f"placed {variable.name} on {variable.device}", flush=True)
    loss, accuracy = model.evaluate(x, y, verbose=0)
    return {"eval_loss": float(loss), "eval_accuracy": float(accuracy)}
