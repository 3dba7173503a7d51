"""Write scikit-learn's 8x8 digits as a CSV (64 pixel columns, then the label)."""

import sys

import numpy as np
from sklearn.datasets import load_digits

digits = load_digits()
rows = np.column_stack([digits.data / 16.0, digits.target])
np.savetxt(
    sys.argv[1] if len(sys.argv) > 1 else "digits.csv",
    rows,
    delimiter=",",
    fmt=["%.4f"] * 64 + ["%d"],
    header=",".join([f"p{i}" for i in range(64)] + ["label"]),
    comments="",
)
