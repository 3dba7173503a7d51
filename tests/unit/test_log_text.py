"""A replica's output line as a terminal leaves it: progress bars at their last state.

The samples under data/ are what tf_keras 2.21 wrote to a file (not a terminal) with
TF_USE_LEGACY_KERAS=1: `model.fit(..., epochs=2, verbose=1)` of a one-layer model, and a
`keras.utils.Progbar(5)` updated five times; byte for byte, backspaces and carriage
returns included.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.node.log_text import screen_line, screen_text

DATA = Path(__file__).parent / "data"


def log_lines(name: str) -> list[str]:
    """The sample's lines as the agent splits its file (on newlines, UTF-8)."""
    return (DATA / name).read_bytes().decode().split("\n")[:-1]


def test_keras_fit_progress_bars_keep_their_last_state() -> None:
    raw = log_lines("tf_keras_fit_verbose1.log")
    assert any("\b" in line and "\r" in line for line in raw)  # the sample is the real thing
    assert [screen_line(line) for line in raw] == [
        "Epoch 1/2",
        "10/10 [==============================] - 0s 2ms/step - loss: 0.5409 - accuracy: 0.7188",
        "Epoch 2/2",
        "10/10 [==============================] - 0s 1ms/step - loss: 0.5309 - accuracy: 0.7312",
        "done",
    ]


def test_a_progbar_updated_five_times_shows_its_fifth_update() -> None:
    raw = log_lines("tf_keras_progbar.log")
    assert raw[0].count("\r") == 5
    assert [screen_line(line) for line in raw] == [
        "5/5 [==============================] - 0s 61ms/step - loss: 0.4567",
        "after",
    ]


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("plain text, untouched", "plain text, untouched"),
        ("tab\tkept", "tab\tkept"),
        ("downloading 10%\rdownloading 100%", "downloading 100%"),
        ("a Windows line\r", "a Windows line"),
        ("done\r   \r", "done"),  # a bar cleared with spaces: its last state that showed
        ("abc\bd", "abd"),
        ("\b\bx", "x"),  # nothing to remove before the first character
        ("\x1b[31mred\x1b[0m and \x1b]0;title\x07plain", "red and plain"),
        ("bell\x07 nul\x00 del\x7f c1\x9b", "bell nul del c1"),
        ("\r", ""),
        ("", ""),
    ],
)
def test_control_characters(written: str, shown: str) -> None:
    assert screen_line(written) == shown


def test_a_tail_is_cleaned_line_by_line() -> None:
    assert screen_text("Epoch 1/1\n\r1/2 [=>]\b\b\b\b\b\b\b\b\r2/2 [==]\nTraceback") == (
        "Epoch 1/1\n2/2 [==]\nTraceback"
    )
