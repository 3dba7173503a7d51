"""The leader's webhook sender (services/webhooks/sender.py): a thread of its own beside
the ingest and the MLflow export, a round every COHORT_WEBHOOK_DELIVERY_INTERVAL seconds.

It never holds up a scheduling pass: no lock of the pass is taken, a round is a claim and a
record per delivery (short transactions), the POSTs run in the sender's own threads with
no transaction open, and the thread rests after each round at least three times the CPU
time the round took (CPU_SHARE of workers/control/tracking.py).
"""

from __future__ import annotations

import logging
import threading
import time

from services.cluster.fencing import Fenced
from services.settings import Settings
from services.webhooks.sender import Sender
from workers.control.term import Term
from workers.control.tracking import rest_after

log = logging.getLogger("cohort.webhooks")

# One sender a process: a leader that lost its lock and won it back may start a new term
# while the last term's thread is still inside a round.
_SENDING = threading.Lock()
BACKLOG_PAUSE = 0.05  # seconds between rounds while deliveries are due faster than sent


def send_while(term: Term, settings: Settings) -> None:
    """Run delivery rounds through the term's fence until the term ends."""
    while term.leading.is_set():
        if _SENDING.acquire(timeout=1.0):
            break
    else:
        return
    sender = Sender(settings, sessions=term.fence.scope)
    try:
        while term.leading.is_set():
            started, cpu = time.monotonic(), time.thread_time()
            backlog = False
            try:
                backlog = sender.run_round()
            except Fenced as exc:
                term.step_down(str(exc))
            except Exception:  # SQL away: the deliveries wait in SQL
                log.exception("webhook round failed; retrying")
            rest = rest_after(
                time.monotonic() - started,
                time.thread_time() - cpu,
                # A backlog (a receiver back after a day down) is worked through at once,
                # within the CPU share, rather than a batch per interval.
                BACKLOG_PAUSE if backlog else settings.WEBHOOK_DELIVERY_INTERVAL,
            )
            term.sleep(rest)
    finally:
        sender.close()
        _SENDING.release()
