"""Open live streams (SSE) per token: at most COHORT_MAX_STREAMS_PER_TOKEN in one api
process; one more is refused with 429 and `Retry-After` before anything is streamed.

Each stream holds memory, a task and a share of the feed reader until its client goes,
so a token that opens streams without end (a script reconnecting in a loop, a leak)
could otherwise starve the process. The count is per process and in memory: a stream
lives in one process, and the count is right the moment a stream ends, however it ends.
"""

from __future__ import annotations

from collections import Counter

from services.exceptions import TooManyRequests

RETRY_AFTER = 10  # seconds: a stream ends when its client goes, which cannot be foreseen


class TooManyStreams(TooManyRequests):
    """A token already holds its allowance of open streams."""


class StreamSlots:
    """How many streams each token holds open in this process."""

    def __init__(self) -> None:
        self.open: Counter[int] = Counter()

    def take(self, token_id: int, limit: int) -> None:
        """Count one more stream for `token_id`, or raise TooManyStreams at `limit`."""
        if self.open[token_id] >= limit:
            raise TooManyStreams(
                f"this token already has {limit} live streams open (the most one token "
                "may hold, COHORT_MAX_STREAMS_PER_TOKEN): close one (another dashboard "
                "tab, a `cohort job logs --follow`) and try again",
                retry_after=RETRY_AFTER,
            )
        self.open[token_id] += 1

    def give_back(self, token_id: int) -> None:
        self.open[token_id] -= 1
        if self.open[token_id] <= 0:
            del self.open[token_id]


SLOTS = StreamSlots()
