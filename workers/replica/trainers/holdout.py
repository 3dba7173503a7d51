"""The built-in trainers' evaluation on a holdout (an evaluation job, a schedule's
`evaluate:`): the saved model in `ctx.model_dir` on the rows of every `*.csv` and
`*.csv.gz` file under `ctx.holdout_dir`, in the digits table's own format (64 pixel
values 0-16, then the label, per row; scikit-learn's digits.csv.gz is one)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf
import tf_keras as keras

from workers.replica.callbacks import announce
from workers.replica.trainers import TrainerContext

PIXELS = 64


def read_holdout(directory: Path) -> tuple[np.ndarray, np.ndarray]:
    """(x in [0, 1], y) of every digits CSV under `directory`, in path order.

    Raises:
        ValueError: no CSV there, or a row that is not 64 pixels and a label.
    """
    files = sorted(
        p for p in directory.rglob("*") if p.is_file() and p.name.endswith((".csv", ".csv.gz"))
    )
    if not files:
        raise ValueError(f"no *.csv or *.csv.gz file under the holdout {directory}")
    table = np.concatenate(
        [np.loadtxt(path, delimiter=",", dtype=np.float32, ndmin=2) for path in files]
    )
    if table.shape[1] != PIXELS + 1:
        raise ValueError(
            f"holdout rows have {table.shape[1]} columns: expected {PIXELS} pixels and a label"
        )
    return table[:, :PIXELS] / 16.0, table[:, PIXELS].astype(np.int32)


def evaluate_saved(ctx: TrainerContext, input_shape: tuple[int, ...]) -> dict[str, float]:
    """The saved model's `accuracy` and `loss` on the holdout."""
    assert ctx.holdout_dir is not None  # an evaluation job's context
    model = keras.models.load_model(str(ctx.model_dir))
    x, y = read_holdout(ctx.holdout_dir)
    data = tf.data.Dataset.from_tensor_slices((x.reshape(-1, *input_shape), y)).batch(256)
    results = model.evaluate(data, verbose=0, return_dict=True)
    announce(f"evaluated on {len(y)} holdout rows")
    return {"accuracy": float(results["accuracy"]), "loss": float(results["loss"])}
