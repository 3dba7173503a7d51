"""Bearer tokens verified from a short in-process cache, for the routes where reading the
token's row on every request costs more than the request's own work (job submissions).

A token found usable is remembered for TTL_SECONDS, counted from when its row was read
(not from when the answer came back), so a revocation committed by any process is
honoured by every api process within TTL_SECONDS: an entry read before the revocation
has expired by then. A revocation in this process forgets every entry at once (`forget`).
Expiry is checked again at each use (the entry holds `expires_at`); unknown, revoked or
expired tokens are never remembered, so they are looked up on every request, as before.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable

from services.models import ApiToken

# Under a second with room to spare: the promise is that a revoked token is refused
# within one second, by every api process.
TTL_SECONDS = 0.5
# Entries of tokens not seen again are dropped wholesale past this many.
MAX_ENTRIES = 10_000


class TokenCache:
    """Usable tokens' rows by their digest, each for `ttl` seconds from its reading."""

    def __init__(self, ttl: float = TTL_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self.clock = clock
        self._entries: dict[str, tuple[float, ApiToken]] = {}
        # Bumped by `forget`: a row read before it is never stored after it.
        self._generation = 0
        self._lock = threading.Lock()

    def reading(self) -> tuple[float, int]:
        """Taken before a token's row is read; handed to `remember` with the row."""
        with self._lock:
            return self.clock(), self._generation

    def get(self, secret: str) -> ApiToken | None:
        """The token's row, if it was read usable less than `ttl` seconds ago."""
        entry = self._entries.get(_key(secret))
        if entry is None or self.clock() - entry[0] >= self.ttl:
            return None
        return entry[1]

    def remember(self, secret: str, token: ApiToken, reading: tuple[float, int]) -> None:
        """Keep a row found usable, read after `reading` was taken."""
        read_at, generation = reading
        with self._lock:
            if generation != self._generation:
                return  # a revocation came in meanwhile: the row may be older than it
            if len(self._entries) >= MAX_ENTRIES:
                self._entries.clear()
            self._entries[_key(secret)] = (read_at, token)

    def forget(self) -> None:
        """Forget every entry (a token was revoked in this process)."""
        with self._lock:
            self._generation += 1
            self._entries.clear()


def _key(secret: str) -> str:
    # A digest, as tokens are stored: the secrets themselves are never kept.
    return hashlib.sha256(secret.encode()).hexdigest()


_cache = TokenCache()


def process_cache() -> TokenCache:
    """This process's cache."""
    return _cache
