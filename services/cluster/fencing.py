"""Fencing tokens: only the newest scheduler leader's transactions commit.

The scheduler's Redis lock elects a leader, but a lock with a TTL can lapse under a
leader that stalls (SIGSTOP, a frozen VM, a long pause) while another takes over; on
resuming, the old one still runs what it was doing — a pass, the events it read — before
it sees the lock is gone. So each leadership term gets a token from SQL, one larger than
the last (`issue_token`), and every transaction the leader commits first checks that its
token is still the newest (`Fence.scope`): an older term's transaction is refused
(`Fenced`) before it writes anything, and its leader sends nothing and steps down.

The token lives in SQL, not in Redis, because SQL is what it guards: a Redis wipe
(FLUSHALL, an empty server) would restart a Redis counter below the tokens already used.

How the check holds against the issue, per database:
- PostgreSQL: the check takes a shared transaction-level advisory lock, held until the
  transaction ends, and issuing takes it exclusively: a new term's token waits for the old
  term's open transactions to end, and the old term's later transactions see the new
  token. (Advisory, not `FOR SHARE` on the row: the leader's pass, events and ingest
  overlap all the time, and row locks shared by several transactions cost a MultiXact and
  a WAL record each; advisory locks live in memory.) A leader frozen inside a
  transaction would make the next one wait for as long as it stays frozen, so the fenced
  transaction is ended by the server after `lease` seconds idle
  (`idle_in_transaction_session_timeout`).
- SQLite: the check is a write (`UPDATE ... WHERE token = mine`), which takes the
  database's one write lock at once, so the check and everything after it are one
  writer's transaction (a read would run outside any transaction under pysqlite's
  implicit BEGIN, and a new token could be issued between it and the writes).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.db import session_scope
from services.models import SchedulerFence

FENCE_ROW = 1  # the table's one row (made by migration 0018)
FENCE_LOCK_KEY = 0x436F686F7246  # "CohorF", F for fence (the pass lock is "Cohort")


class Fenced(Exception):
    """A newer leader holds the token: this one's transaction must not commit."""

    def __init__(self, token: int, newest: int) -> None:
        super().__init__(
            f"a newer leader holds fencing token {newest} (this scheduler's "
            f"is {token}); its transaction was refused, nothing written or sent"
        )
        self.token = token
        self.newest = newest


def issue_token(*, session: Session) -> int:
    """A new term's token, larger than any issued before; the caller commits."""
    if session.get_bind().dialect.name == "postgresql":  # waits for open fenced transactions
        session.execute(sa.select(sa.func.pg_advisory_xact_lock(FENCE_LOCK_KEY)))
    session.execute(
        sa.update(SchedulerFence)
        .where(SchedulerFence.id == FENCE_ROW)
        .values(token=SchedulerFence.token + 1)
    )
    return newest_token(session=session)


def newest_token(*, session: Session) -> int:
    """The token of the newest term (0 before any leader)."""
    return session.execute(
        sa.select(SchedulerFence.token).where(SchedulerFence.id == FENCE_ROW)
    ).scalar_one()


def check_token(*, session: Session, token: int, lease: float | None = None) -> None:
    """Hold off newer terms until this transaction ends, if `token` is still the newest;
    call it first in the transaction, before it reads or locks anything else.

    Args:
        lease: on PostgreSQL, end this transaction if it sits idle this many seconds
            (its process frozen): no new term waits longer for it.

    Raises:
        Fenced: a newer term's token exists; nothing was written.
    """
    if session.get_bind().dialect.name == "postgresql":
        hold = [sa.func.pg_advisory_xact_lock_shared(FENCE_LOCK_KEY)]
        if lease is not None:  # in the same round trip: every fenced transaction pays it
            timeout = f"{max(1, round(lease * 1000))}ms"
            hold.append(sa.func.set_config("idle_in_transaction_session_timeout", timeout, True))
        session.execute(sa.select(*hold))
        # Read after the lock, in a statement of its own: a statement's snapshot is taken
        # when it starts, so a read in the locking statement could miss a token committed
        # while it waited. No token can be issued from here until this transaction ends.
        newest = newest_token(session=session)
        if newest != token:
            raise Fenced(token, newest)
        return
    # SQLite: a write first, so this transaction holds the write lock from here on.
    held = session.execute(
        sa.update(SchedulerFence)
        .where(SchedulerFence.id == FENCE_ROW, SchedulerFence.token == token)
        .values(token=SchedulerFence.token)
    )
    if cast(sa.CursorResult[object], held).rowcount != 1:
        raise Fenced(token, newest_token(session=session))


@dataclass(frozen=True)
class Fence:
    """One leadership term's token, and how long its transactions may sit idle."""

    token: int
    lease: float

    @contextmanager
    def scope(self) -> Iterator[Session]:
        """A transaction (services.db.session_scope) that commits only while this term's
        token is the newest.

        Raises:
            Fenced: a newer term's token exists; the transaction is rolled back.
        """
        with session_scope() as session:
            check_token(session=session, token=self.token, lease=self.lease)
            yield session


def begin_term(lease: float) -> Fence:
    """Issue and commit a new term's token."""
    with session_scope() as session:
        token = issue_token(session=session)
    return Fence(token, lease)
