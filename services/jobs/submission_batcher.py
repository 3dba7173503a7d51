"""Grouped commits for job submissions: one transaction for the submissions of many requests.

Admission to a project with a queued-jobs quota holds the project's row lock from its
count to its commit, so concurrent submissions to one project queue up behind each
other's commits, one at a time. The batcher admits the submissions waiting at that moment
together instead (`store.admit_submissions`: one lock, one count, the inserts, one
commit), while each request still gets its own job, or its own error, back.

No batch waits for more to arrive: a thread takes whatever is waiting when it is free,
so a lone submission is committed at once, and under a burst the batches grow by
themselves with the time each commit takes. A few threads admit groups side by side
(THREADS); groups of one project are serialized by its row lock, as single submissions
were, so the quota holds exactly.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from services.db import session_scope
from services.jobs.admission import Admitted, Submission
from services.jobs.store import admit_submissions
from services.settings import Settings

log = logging.getLogger(__name__)

# At most this many submissions in one transaction (the api's thread pool holds 40
# requests at once; more are never waiting in one process).
MAX_BATCH = 200
# Groups admitted at once. One project's groups still take turns at its row lock, but
# the rest of a group's work (reading the limits, the round trips before the lock, the
# requests' answers) overlaps, and the groups of other projects never wait.
THREADS = 4


@dataclass
class _Waiting:
    submission: Submission
    settings: Settings
    future: Future[Admitted | Exception] = field(default_factory=Future)


class SubmissionBatcher:
    """Admits submissions from many threads in grouped transactions (threads of its own,
    started on first use)."""

    def __init__(
        self,
        sessions: Callable[[], AbstractContextManager[Session]] = session_scope,
        max_batch: int = MAX_BATCH,
        threads: int = THREADS,
    ) -> None:
        self.sessions = sessions  # a transaction: committed on leaving, rolled back on error
        self.max_batch = max_batch
        self.threads = threads
        self._queue: queue.SimpleQueue[_Waiting | None] = queue.SimpleQueue()
        self._running: list[threading.Thread] = []
        self._start_lock = threading.Lock()

    def submit(self, submission: Submission, settings: Settings) -> Admitted:
        """Admit one checked submission; returns once its job is committed.

        Raises:
            whatever refused this submission alone (see `store.admit_submissions`).
        """
        outcome = self._enqueue(submission, settings).result()
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def admit(self, submission: Submission, settings: Settings) -> Admitted:
        """`submit` for a coroutine: it waits on the event loop, holding no thread.

        Raises:
            as `submit`.
        """
        # Shielded: a request cancelled while waiting must not cancel the future, which
        # the batcher's thread sets once the group commits (set on a cancelled future, it
        # would raise in that thread and end it).
        outcome = await asyncio.shield(asyncio.wrap_future(self._enqueue(submission, settings)))
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def _enqueue(self, submission: Submission, settings: Settings) -> Future[Admitted | Exception]:
        waiting = _Waiting(submission, settings)
        self._start()
        self._queue.put(waiting)
        return waiting.future

    def _start(self) -> None:
        if self._running:
            return
        with self._start_lock:
            if not self._running:
                for number in range(self.threads):
                    thread = threading.Thread(
                        target=self._run, daemon=True, name=f"submissions-{number}"
                    )
                    thread.start()
                    self._running.append(thread)

    def close(self) -> None:
        """Stop the threads once the submissions already waiting are admitted."""
        with self._start_lock:
            running, self._running = self._running, []
        for _ in running:
            self._queue.put(None)
        for thread in running:
            thread.join()

    def _run(self) -> None:
        closing = False
        while not closing:
            batch: list[_Waiting] = []
            item = self._queue.get()
            while item is not None:
                batch.append(item)
                if len(batch) >= self.max_batch:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            closing = item is None
            for settings in {id(w.settings): w.settings for w in batch}.values():
                self._admit([w for w in batch if w.settings is settings])

    def _admit(self, batch: list[_Waiting]) -> None:
        try:
            with self.sessions() as session:
                outcomes = admit_submissions(
                    session=session,
                    settings=batch[0].settings,
                    submissions=[w.submission for w in batch],
                )
        except BaseException as exc:  # noqa: BLE001 - handed to the requests, never lost
            if len(batch) == 1:
                batch[0].future.set_result(
                    exc
                    if isinstance(exc, Exception)
                    else RuntimeError(f"admission failed: {exc!r}")
                )
                return
            # The transaction failed as a whole (the database, not one submission): each
            # is tried alone, so one submission's failure is never another's.
            log.warning(
                "a group of %d submissions failed (%s); admitting each alone", len(batch), exc
            )
            for waiting in batch:
                self._admit([waiting])
            return
        # Committed: only now does any request learn its job's id.
        for waiting, outcome in zip(batch, outcomes, strict=True):
            waiting.future.set_result(outcome)


_batcher: SubmissionBatcher | None = None
_batcher_lock = threading.Lock()


def process_batcher() -> SubmissionBatcher:
    """This process's batcher, on the process's database."""
    global _batcher
    with _batcher_lock:
        if _batcher is None:
            _batcher = SubmissionBatcher()
        return _batcher
