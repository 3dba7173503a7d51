"""Noticing that Redis lost its data: a restart without persistence, a `FLUSHALL`, or an
empty server put in its place at the same address.

Redis' `run_id` changes when the server restarts but not when its data is flushed, and
a flush erases as much: metric and log entries not yet stored, agents' events, replica
claims, current attempts, the leader's lock. So every process that must act on a wipe
watches one marker key, GENERATION_KEY, instead: whoever finds it missing writes a new
random value (SET NX: one value wins), and a process that had seen another value, or
finds it missing, knows that what it put in Redis before may be gone. Each process
notices a wipe once, whichever process writes the new marker first.
"""

from __future__ import annotations

import secrets
from typing import Any

from services.wire.keys import GENERATION_KEY


def read_marker(pipe: Any) -> None:
    """Queue the marker's read on `pipe`, a MULTI pipeline: SET NX (a new marker if it is
    missing) and GET, so the value read is the one that won, even if another process (or
    another wipe) came in between. The pipeline's last result is then the marker, for
    `Generation.saw`."""
    pipe.set(GENERATION_KEY, secrets.token_hex(8), nx=True)
    pipe.get(GENERATION_KEY)


class Generation:
    """One process's view of the Redis data generation it has seen last."""

    def __init__(self) -> None:
        self.seen: str | None = None  # None: not checked yet

    def check(self, client: Any) -> bool:
        """Whether Redis lost its data since the last check (never on the first one).

        Raises:
            redis.RedisError: Redis did not answer; nothing is known, nothing changes.
        """
        pipe = client.pipeline(transaction=True)
        read_marker(pipe)
        return self.saw(pipe.execute()[-1])

    def saw(self, marker: bytes | str) -> bool:
        """As `check`, with the marker a transaction of another's read (`read_marker`)."""
        current = marker.decode() if isinstance(marker, bytes) else str(marker)
        wiped = self.seen is not None and current != self.seen
        self.seen = current
        return wiped
