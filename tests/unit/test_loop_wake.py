"""A signal wakes the agent's Celery loop (workers/node/loop_wake.py): the C-level
handler writes to a pipe the loop polls, so the poll returns as the signal arrives."""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Iterator

import pytest
from kombu.asynchronous import Hub

from workers.node import loop_wake


@pytest.fixture
def hub() -> Iterator[Hub]:
    previous = signal.getsignal(signal.SIGUSR2)
    wakeup = signal.set_wakeup_fd(-1)
    hub = Hub()
    try:
        yield hub
    finally:
        hub.close()
        signal.signal(signal.SIGUSR2, previous)
        signal.set_wakeup_fd(wakeup)
        if loop_wake._pipe is not None:
            for fd in loop_wake._pipe:
                os.close(fd)
            loop_wake._pipe = None


def readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])


def test_a_signal_makes_the_loops_pipe_readable_and_the_loop_drains_it(hub: Hub) -> None:
    got: list[int] = []
    signal.signal(signal.SIGUSR2, lambda signum, _frame: got.append(signum))
    loop_wake.wake_on_signals(hub)
    assert loop_wake._pipe is not None
    read_fd = loop_wake._pipe[0]
    assert read_fd in hub.readers  # polled with the loop's sockets
    assert not readable(read_fd)

    signal.raise_signal(signal.SIGUSR2)
    assert got == [signal.SIGUSR2]  # the Python handler ran, as before
    assert readable(read_fd)  # and the poll has something to return for

    next(hub.create_loop())  # one turn of the loop: its reader empties the pipe
    assert not readable(read_fd)


def test_called_again_after_a_reconnection_it_keeps_one_pipe(hub: Hub) -> None:
    loop_wake.wake_on_signals(hub)
    first = loop_wake._pipe
    loop_wake.wake_on_signals(hub)
    assert loop_wake._pipe == first
    assert first is not None and first[0] in hub.readers
