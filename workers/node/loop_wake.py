"""A signal wakes the agent's Celery loop at once, instead of the loop waking to look.

Celery's worker loop (kombu's hub) notices a SIGTERM only when its poll returns: the
Python-level handler runs when the signal arrives, but the poll is then resumed (PEP 475)
for the rest of its timeout, up to a second with nothing else scheduled. A timer every
0.1 s used to bound that wait; it woke the loop ten times a second for nothing, and each
wake-up went through kombu's polling set-up: most of an idle agent's own CPU
(docs/benchmarks.md, issue 33). Instead, the C-level handler writes the signal's number
to a pipe (`signal.set_wakeup_fd`) whose read end the loop polls with its sockets: the
poll returns as the signal arrives, and the loop then sees what the handler set.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import Any

log = logging.getLogger("cohort.agent")

# Where set_wakeup_fd cannot be used (not on the main thread): the loop wakes this often.
FALLBACK_TICK = 0.1

_pipe: tuple[int, int] | None = None  # (read, write): one per process


def wake_on_signals(hub: Any) -> None:
    """Make `hub`'s poll return whenever this process gets a signal (idempotent: the
    worker calls it again after a reconnection, possibly with a new hub)."""
    global _pipe
    if _pipe is None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)  # a full pipe must not block the handler
        try:
            signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError:  # only the main thread may set it
            os.close(read_fd)
            os.close(write_fd)
            log.warning("signals cannot wake the worker's loop: it looks every %ss", FALLBACK_TICK)
            hub.call_repeatedly(FALLBACK_TICK, lambda: None)
            return
        _pipe = (read_fd, write_fd)
    hub.add_reader(_pipe[0], _drain, _pipe[0])


def _drain(read_fd: int) -> None:
    """Empty the pipe; the loop goes round and sees what the signal's handler set."""
    try:
        while os.read(read_fd, 512):
            pass
    except BlockingIOError:
        pass
