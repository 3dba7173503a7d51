"""One scheduling pass at a time across scheduler processes, enforced by the database.

The scheduler's Redis lock already elects one leader, but a lock with a TTL can
expire under a leader that stalls (a long GC pause, a frozen VM) while a second
process takes over. On PostgreSQL a transaction-scoped advisory lock makes the
second pass wait until the first has committed, and then read what it placed, so
two passes can never place the same capacity twice. SQLite allows one writer at a
time anyway.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

PASS_LOCK_KEY = 0x436F686F7274  # "Cohort"


def lock_pass(*, session: Session) -> None:
    """Block until no other transaction runs a pass; held until this one ends."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": PASS_LOCK_KEY})
