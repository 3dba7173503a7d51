"""A replica's signal handlers survive being re-entered (workers/replica/signal_flags.py).

A second signal can run a Python handler again between two bytecodes of the first. The
test re-enters each handler at every function call its first run makes (a trace hook
calls the handler there, as the interpreter would on a second signal): a handler that
holds a lock across a call, as `threading.Event.set` did, waits on itself for good."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from workers.replica import backups, termination
from workers.replica.signal_flags import SignalFlag


def reentered_everywhere(handler: Callable[[], None]) -> bool:
    """Run `handler`, re-entering it once at each call its first run makes; whether it
    (and every re-entry) returned within 5 s."""

    def run() -> None:
        depth = [0]

        def tracer(_frame: FrameType, event: str, _arg: Any) -> Any:
            if event == "call" and depth[0] == 0:
                depth[0] += 1  # the re-entry itself is not re-entered
                try:
                    handler()
                except SystemExit:
                    pass
                finally:
                    depth[0] -= 1
            return None

        sys.settrace(tracer)
        try:
            handler()
        except SystemExit:
            pass
        finally:
            sys.settrace(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(5)
    return not thread.is_alive()


def test_the_checkpoint_request_handler_survives_a_second_request_inside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(backups, "_requested", SignalFlag())
    assert reentered_everywhere(lambda: backups._on_checkpoint_signal(signal.SIGUSR1, None))
    assert backups.checkpoint_requested()


def test_the_sigterm_handler_survives_a_second_sigterm_inside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(termination, "terminated", SignalFlag())
    assert reentered_everywhere(lambda: termination._on_sigterm(signal.SIGTERM, None))
    assert termination.terminated.is_set()


def test_the_check_catches_a_handler_that_holds_a_lock_across_a_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What the handlers did: threading.Event.set holds its condition's lock while it
    # calls notify_all. The check must see that hang, or it proves nothing above.
    monkeypatch.setattr(backups, "_requested", threading.Event())
    assert not reentered_everywhere(lambda: backups._on_checkpoint_signal(signal.SIGUSR1, None))
