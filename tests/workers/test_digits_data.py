"""The built-in trainers' data: scikit-learn's digits table, split without importing
scikit-learn (its import cost each replica half a CPU-second before its first step)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from workers.replica.trainers.mlp_digits import TEST_FRACTION, digits_file, load_splits


def test_the_split_holds_out_a_fifth_of_every_class_and_keeps_every_row_once() -> None:
    x_train, y_train, x_test, y_test = load_splits(0)
    assert x_train.shape == (len(y_train), 64) and x_test.shape == (len(y_test), 64)
    assert len(y_train) + len(y_test) == 1797
    assert x_train.dtype == np.float32 and y_train.dtype == np.int32
    assert 0.0 <= x_train.min() and x_train.max() == 1.0  # pixels 0-16, scaled
    # Every row of the table once: the two parts together are the table, in another order.
    table = np.loadtxt(digits_file(), delimiter=",", dtype=np.float32)
    split = np.column_stack(
        [np.concatenate([x_train, x_test]) * 16.0, np.concatenate([y_train, y_test])]
    ).astype(np.float32)
    assert np.array_equal(
        np.unique(split, axis=0, return_counts=True)[1],
        np.unique(table, axis=0, return_counts=True)[1],
    )
    assert np.array_equal(np.unique(split, axis=0), np.unique(table, axis=0))
    for label in range(10):
        held, kept = (y_test == label).sum(), (y_train == label).sum()
        assert abs(held - TEST_FRACTION * (held + kept)) <= 0.5, (label, held, kept)


def test_the_same_seed_gives_the_same_split_and_another_seed_another() -> None:
    first, again, other = load_splits(0), load_splits(0), load_splits(1)
    for a, b in zip(first, again, strict=True):
        assert np.array_equal(a, b)
    assert not np.array_equal(first[3], other[3])
    # The train rows are not in class order: a shuffled stream starts from a mixed buffer.
    assert len(set(first[1][:50].tolist())) > 5


def test_loading_the_digits_does_not_import_scikit_learn() -> None:
    script = (
        "import sys\n"
        "from workers.replica.trainers.mlp_digits import load_splits\n"
        "load_splits(0)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1"},
    )
    assert out.stdout.strip() == "[]", out.stdout
