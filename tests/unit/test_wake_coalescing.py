"""The api's `wake` events are coalesced: the first at once, then at most one per window,
and every request is followed by a wake sent after it (none is dropped)."""

from __future__ import annotations

import threading
import time
from typing import Any

from services.wire.client import _WakeCoalescer


class Recorder:
    """Stands for the Redis client: records when each event was appended."""

    def __init__(self) -> None:
        self.sent: list[float] = []
        self.arrived = threading.Event()

    def xadd(self, *_: Any, **__: Any) -> None:
        self.sent.append(time.monotonic())
        self.arrived.set()


def test_a_burst_of_wakes_sends_one_now_and_one_after_the_last_request() -> None:
    client = Recorder()
    wakes = _WakeCoalescer(window=0.2)
    wakes.request(client)  # type: ignore[arg-type]
    assert len(client.sent) == 1  # at once, not after a window
    client.arrived.clear()
    last = 0.0
    for _ in range(50):
        wakes.request(client)  # type: ignore[arg-type]
        last = time.monotonic()
    assert len(client.sent) == 1  # the burst waits for the window's end
    assert client.arrived.wait(5)
    assert len(client.sent) == 2
    assert client.sent[1] >= last  # sent after every request it stands for
    assert client.sent[1] - client.sent[0] >= 0.2


def test_wakes_further_apart_than_the_window_each_go_at_once() -> None:
    client = Recorder()
    wakes = _WakeCoalescer(window=0.0)
    for _ in range(3):
        wakes.request(client)  # type: ignore[arg-type]
    assert len(client.sent) == 3
