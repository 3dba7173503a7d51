"""Judge a model on the schedule's holdout: Cohort runs this once for each new model and,
when the holdout changed, for the model `production` holds, so both are judged on the
same data. $COHORT_MODEL_DIR is the model (read-only), $COHORT_HOLDOUT_DIR the holdout."""

import os
from pathlib import Path

import numpy as np
import tensorflow as tf

from cohort import report

model = tf.keras.models.load_model(os.environ["COHORT_MODEL_DIR"])
rows = np.concatenate(
    [
        np.loadtxt(path, delimiter=",", ndmin=2)
        for path in sorted(Path(os.environ["COHORT_HOLDOUT_DIR"]).rglob("*.csv"))
    ]
)
x, y = rows[:, :-1] / 16.0, rows[:, -1].astype("int64")
predicted = np.argmax(model.predict(x, verbose=0), axis=1)
report(0, accuracy=float(np.mean(predicted == y)), rows=len(rows))
