"""The flags a replica's signal handlers set: SIGTERM's, and "checkpoint now" (SIGUSR1).

A Python signal handler runs in the main thread between two bytecodes, and a second
signal can run it again between two bytecodes of the first. `threading.Event.set` takes
a lock: re-entered while the first call held it, the handler waited on itself for good.
A replica asked to checkpoint twice in quick succession (an operator's drain and the
node's own shutdown notice) could hang so, never saving nor exiting; the test that sends
requests back to back (tests/workers/test_runner_local.py) hung about one run in ten on
a loaded machine. These flags take no lock: setting one is an assignment, atomic under
the GIL. Nothing waits on them; they are read where the work is (a batch's end, `main`).
"""

from __future__ import annotations


class SignalFlag:
    """A flag a signal handler may set, however often and however re-entered."""

    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value = False

    def set(self) -> None:
        self._value = True

    def is_set(self) -> bool:
        return self._value
