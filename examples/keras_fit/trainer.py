"""A Keras `fit` trainer run as `trainer: "trainer:train"` from a code bundle.

Cohort imports this module inside each replica (the bundle is on `sys.path`), builds
the strategy from the job (`TF_CONFIG` for multi-worker jobs) and calls `train(ctx)`.
`ctx.callbacks()` streams every compiled metric per step and sends progress beats;
`BackupAndRestore` under `ctx.checkpoint_dir` lets a restarted gang, on any node,
resume from its last checkpoint (Cohort syncs that directory to the artifact store).
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from typing import Any

import numpy as np
import tensorflow as tf
import tf_keras as keras

DEFAULTS: dict[str, Any] = {
    "epochs": 3,
    "steps_per_epoch": 20,
    "batch_size": 32,
    "learning_rate": 0.01,
    "layers": [64, 32],
}


def make_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Two noisy interleaved spirals: enough structure to learn, no download."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.5, 3 * np.pi, 4096)
    label = rng.integers(0, 2, t.shape[0])
    angle = t + np.pi * label
    x = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1) / (3 * np.pi)
    return (x + rng.normal(0, 0.02, x.shape)).astype(np.float32), label.astype(np.int32)


def train(ctx: Any) -> dict[str, float]:
    hp = {**DEFAULTS, **ctx.hyperparameters}  # nested JSON is fine: "layers" is a list
    x, y = make_data()
    global_batch = int(hp["batch_size"]) * ctx.strategy.num_replicas_in_sync
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(4096, seed=0)
        .repeat()
        .batch(global_batch)
        .with_options(options)
    )

    with ctx.strategy.scope():
        model = keras.Sequential(
            [
                keras.layers.Input(shape=(2,)),
                *[keras.layers.Dense(int(n), activation="relu") for n in hp["layers"]],
                keras.layers.Dense(2),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(float(hp["learning_rate"])),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        model.distribute_reduction_method = "first"  # report the all-reduced value once

    backup = keras.callbacks.BackupAndRestore(backup_dir=str(ctx.checkpoint_dir))
    history = model.fit(
        dataset,
        epochs=int(hp["epochs"]),
        steps_per_epoch=int(hp["steps_per_epoch"]),
        callbacks=[*ctx.callbacks(global_batch), backup],
        verbose=2,
    )

    # Saving runs collectives, so every worker saves; only the chief's copy is kept.
    if ctx.is_chief:
        model.save(str(ctx.model_dir))
    else:
        scratch = tempfile.mkdtemp()
        model.save(scratch)
        with contextlib.suppress(OSError):
            shutil.rmtree(scratch)
    return {"final_loss": float(history.history["loss"][-1])}
