"""A replica's output line as a terminal would have left it on screen.

Progress bars redraw themselves in place: Keras' `Progbar` (tf_keras) writes each state
after a run of backspaces and a carriage return, and it does so even when its output is
a file rather than a terminal (it takes any POSIX system as a dynamic display). Shipped
as written, one epoch's line holds every state of its bar and reads as boxes in the
dashboard. The agent ships each line's last state instead; the raw log file, kept as an
artifact, stays as the replica wrote it.
"""

from __future__ import annotations

import re

# ANSI escape sequences (colours, cursor moves: CSI; window titles: OSC; other two-byte
# escapes): dropped whole, not left as "[31m" once their ESC is gone.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
# Control characters a line can hold that show nothing: C0 but tab, DEL and C1.
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def screen_line(text: str) -> str:
    """`text` (one line, without its newline) as it reads once drawn: the last segment
    after a carriage return that shows something, each backspace removing the character
    before it, escape sequences and other control characters but tab dropped."""
    if not _CONTROLS.search(text):
        return text  # the common line: one scan, no copy
    text = _ESCAPES.sub("", text)
    shown = ""
    for segment in text.split("\r"):
        kept: list[str] = []
        for char in segment:
            if char == "\b":
                if kept:
                    kept.pop()
            else:
                kept.append(char)
        drawn = _CONTROLS.sub("", "".join(kept))
        if drawn.strip():
            shown = drawn
    return shown


def screen_text(text: str) -> str:
    """Several lines (a log's tail), each as `screen_line` leaves it."""
    return "\n".join(screen_line(line) for line in text.split("\n"))
