"""Retrain on the digits table a push just stored: a small Keras network, saved where
Cohort keeps a job's model ($COHORT_MODEL_DIR), so the schedule's evaluation can judge it.

The rows are 64 pixel values (0-16) then the label, as `data/digits/train.csv` holds them.
"""

import os

import numpy as np
import tensorflow as tf

from cohort import report

rows = np.loadtxt(os.path.join(os.environ["COHORT_INPUT_DIR"], "train.csv"), delimiter=",", ndmin=2)
x, y = rows[:, :-1] / 16.0, rows[:, -1].astype("int64")
# What this run is for: the content of the data its push made, and when it fired.
print(
    f"training on {os.environ.get('COHORT_DATA_VERSION')} ({len(rows)} rows), "
    f"fired {os.environ.get('COHORT_SCHEDULED_FOR')}",
    flush=True,
)

tf.keras.utils.set_random_seed(int(os.environ.get("SEED", "7")))
model = tf.keras.Sequential(
    [
        tf.keras.Input((64,)),
        tf.keras.layers.Dense(32, activation="relu"),
        tf.keras.layers.Dense(10),
    ]
)
model.compile(
    optimizer="adam",
    loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)
history = model.fit(x, y, epochs=int(os.environ.get("EPOCHS", "30")), verbose=0)
for epoch, (loss, accuracy) in enumerate(
    zip(history.history["loss"], history.history["accuracy"], strict=True), start=1
):
    report(epoch, loss=loss, train_accuracy=accuracy)
model.save(os.environ["COHORT_MODEL_DIR"])
