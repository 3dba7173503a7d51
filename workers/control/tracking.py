"""The leader's MLflow export (services/tracking/): a thread of its own beside the ingest, a
round every COHORT_MLFLOW_EXPORT_INTERVAL seconds.

It never holds up a scheduling pass: no lock of the pass is taken, each round's SQL is a
few short transactions, the calls to MLflow hold none, and the thread rests after each
round at least three times the CPU time the round took, so that however much is left to
send (a server back after a day down) it takes at most a quarter of the one core that
Python's lock lets the process use.
"""

from __future__ import annotations

import logging
import threading
import time

import redis

from services.cluster.fencing import Fenced
from services.settings import Settings
from services.tracking.exporter import Exporter
from workers.control.term import Term

log = logging.getLogger("cohort.mlflow")

CPU_SHARE = 0.25  # of a core, at most, while there is a backlog

# One exporter a process: a leader that lost its lock and won it back may start a new term
# while the last term's thread is still inside a round.
_EXPORTING = threading.Lock()


def rest_after(round_seconds: float, round_cpu: float, interval: float) -> float:
    """Seconds to rest after a round: the rest of the interval, and never less than the
    round's CPU time × (1 / CPU_SHARE - 1)."""
    return max(interval - round_seconds, round_cpu * (1 / CPU_SHARE - 1))


def export_while(client: redis.Redis, term: Term, settings: Settings) -> None:
    """Run export rounds through the term's fence until the term ends."""
    while term.leading.is_set():
        if _EXPORTING.acquire(timeout=1.0):
            break
    else:
        return
    try:
        exporter = Exporter(settings, client, sessions=term.fence.scope)
        while term.leading.is_set():
            started, cpu = time.monotonic(), time.thread_time()
            try:
                exporter.run_round()
            except Fenced as exc:
                term.step_down(str(exc))
            except Exception:  # SQL or Redis away: SQL holds where each run stands
                log.exception("MLflow export round failed; retrying")
            rest = rest_after(
                time.monotonic() - started,
                time.thread_time() - cpu,
                settings.MLFLOW_EXPORT_INTERVAL,
            )
            term.sleep(rest)
    finally:
        _EXPORTING.release()
