"""Built-in trainer `cnn_digits`: a small conv net on scikit-learn's bundled digits,
as 8x8x1 images.

It trains exactly as `mlp_digits` does (the same data, sharding, distribution
options, checkpoints and saving: `mlp_digits.fit`); only the network differs, so it
shows a conv model under every strategy and is the second benchmark workload.
"""

from __future__ import annotations

from typing import Any

import tf_keras as keras

from workers.replica.backups import DEFAULT_BACKUP_STEPS
from workers.replica.trainers import DEFAULT_BATCH_SIZE, TrainerContext
from workers.replica.trainers.holdout import evaluate_saved
from workers.replica.trainers.mlp_digits import evaluate_network, fit

DEFAULTS: dict[str, Any] = {
    "epochs": 5,
    "steps_per_epoch": 20,
    "batch_size": DEFAULT_BATCH_SIZE,  # per replica
    "learning_rate": 0.005,
    "filters": 16,
    "seed": 0,
    "checkpoint_every_steps": DEFAULT_BACKUP_STEPS,  # as in mlp_digits
    "deterministic": True,
    "backups": True,
}


def cnn(filters: int) -> keras.Model:
    """Two 3x3 conv layers, a pooling and a dense head; uncompiled."""
    return keras.Sequential(
        [
            keras.layers.Input(shape=(8, 8, 1)),
            keras.layers.Conv2D(filters, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(2 * filters, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"),
            # Logits in float32 even under a mixed-precision policy, as Keras advises.
            keras.layers.Dense(10, dtype="float32"),
        ]
    )


def train(ctx: TrainerContext) -> dict[str, float]:
    """Train the conv net on this replica's shard; evaluate, save, return metrics."""
    hp = {**DEFAULTS, **ctx.hyperparameters}
    return fit(ctx, hp, lambda: cnn(int(hp["filters"])), (8, 8, 1))


def evaluate(ctx: TrainerContext) -> dict[str, float]:
    """The conv net's evaluator under parameter_server (mlp_digits.evaluate_network); in
    an evaluation job, the saved model on the holdout (holdout.py)."""
    if ctx.holdout_dir is not None:
        return evaluate_saved(ctx, (8, 8, 1))
    hp = {**DEFAULTS, **ctx.hyperparameters}
    return evaluate_network(ctx, hp, lambda: cnn(int(hp["filters"])), (8, 8, 1))
