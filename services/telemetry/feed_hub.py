"""One reader of the live feeds for all the followers of a process.

Every follower of a job (an SSE client, services/telemetry/follow.py) needs the entries of
that job's feed (`cohort:live:<job>`, services/telemetry/live.py) after its own position.
Were each to block in its own XREAD, each would hold a Redis connection for as long as it
follows: 1000 open streams, 1000 connections. Here one task per process (per event loop)
reads every followed feed with one XREAD on one connection and hands the entries to each
follower's own queue; a feed's first follower in the process asks for its newest entry
(XREVRANGE), later ones start from where the reader is, and these short reads share a
small pool. A process then holds at most POOL_SIZE connections however many follow.

A follower never waits for another: its queue is its own, and one that falls more than
QUEUE_LIMIT entries behind (a client that reads slowly) drops its queue and reads the
entries back from Redis with XRANGE from its own position.
Entries are handed over in feed order and filtered by id, so an entry read both ways is
given once.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import deque
from typing import Any

import redis.asyncio as aredis
from redis.asyncio.connection import BlockingConnectionPool
from redis.exceptions import RedisError

from services.settings import get_settings

log = logging.getLogger("cohort.follow")

READER_NAME = "cohort-feed-reader"  # its connections' name in Redis's CLIENT LIST
POOL_SIZE = 4  # connections per process: the reader's XREAD plus short reads
BLOCK_MS = 500  # how long the XREAD waits: also how soon a new feed is read
QUEUE_LIMIT = 500  # entries a follower may be behind before it reads them back itself
POOL_WAIT = 60.0  # seconds a short read may wait for a connection (a burst of new streams)
RETRY_AFTER_ERROR = 1.0  # seconds before the reader tries Redis again

Entry = tuple[str, dict[str, Any]]  # (entry id, fields)


def entry_order(entry_id: str) -> tuple[int, int]:
    """A stream entry id (`<ms>-<seq>`) as something that sorts as Redis orders them."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class Subscription:
    """One follower's view of one feed: the entries after its position, in order."""

    def __init__(self, hub: FeedHub, client: aredis.Redis, key: str, position: str) -> None:
        self.hub, self.client, self.key = hub, client, key
        self.position = position
        self.queue: deque[Entry] = deque()
        self.arrived = asyncio.Event()
        # Read back from Redis (XRANGE) until caught up: after the queue overflowed (or
        # from the start, see FeedHub.subscribe). `drops` tells a read-back that raced
        # an overflow.
        self.behind = False
        self.drops = 0

    def deliver(self, entries: list[Entry]) -> None:
        """Queue entries the reader read (the hub calls this)."""
        if len(self.queue) + len(entries) > QUEUE_LIMIT:
            self.queue.clear()
            self.behind = True
            self.drops += 1
        else:
            self.queue.extend(entries)
        self.arrived.set()

    async def read(self, count: int, timeout: float) -> list[Entry]:
        """Up to `count` entries after the position (waiting up to `timeout` seconds for
        one), or [] when none came."""
        if self.behind:
            drops = self.drops
            try:
                entries: list[Entry] = await self.client.xrange(  # type: ignore[assignment]
                    self.key, min=f"({self.position}", max="+", count=count
                )
            except RedisError:
                # As for the reader: the follower carries on from SQL meanwhile.
                log.warning("reading feed %s failed", self.key, exc_info=True)
                await asyncio.sleep(timeout)
                return []
            if len(entries) < count and drops == self.drops:
                self.behind = False  # what comes next is in the queue
        else:
            if not self.queue:
                self.arrived.clear()
                # Not wait_for: that starts a task per wait, and every open stream of a
                # quiet job waits out its timeout once a STATUS_POLL.
                try:
                    async with asyncio.timeout(timeout):
                        await self.arrived.wait()
                except TimeoutError:
                    return []
                if self.behind:
                    return await self.read(count, timeout)
            entries = [self.queue.popleft() for _ in range(min(count, len(self.queue)))]
        after = entry_order(self.position)
        entries = [e for e in entries if entry_order(e[0]) > after]
        if entries:
            self.position = entries[-1][0]
        return entries

    def close(self) -> None:
        self.hub.unsubscribe(self)


class FeedHub:
    """The reader of one event loop: which feeds are followed, from where, by whom."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client: aredis.Redis | None = None
        self.task: asyncio.Task[None] | None = None
        self.followers: dict[str, set[Subscription]] = {}
        self.positions: dict[str, str] = {}  # per feed: the last entry the reader read

    async def subscribe(self, key: str) -> Subscription:
        """Follow feed `key` from now on: every entry appended after this call comes
        through the subscription, so a follower subscribes *before* it reads the history
        those entries follow. Only a feed new to this process costs a Redis call."""
        if self.client is None:
            pool = BlockingConnectionPool.from_url(
                self.url,
                max_connections=POOL_SIZE,
                timeout=POOL_WAIT,
                client_name=READER_NAME,
                decode_responses=True,
            )
            self.client = aredis.Redis.from_pool(pool)  # closing it closes the pool
        client = self.client
        if key in self.positions:
            # Everything up to where the reader is was committed to SQL before it was
            # appended, so the history read next has it; the reader brings what follows.
            position = self.positions[key]
        else:
            try:
                newest = await client.xrevrange(key, count=1)
            except Exception:
                # The reader closed the pool under this call (its last follower left just
                # now; redis-py then fails in more ways than RedisError): start anew on a
                # new one.
                if self.client is not client:
                    return await self.subscribe(key)
                raise
            position = str(newest[0][0]) if newest else "0-0"
            if self.client is not client:  # the reader closed it meanwhile: start anew
                return await self.subscribe(key)
        subscription = Subscription(self, client, key, position)
        # A feed the reader already reads past `position` (it read on while XREVRANGE
        # was answered): the subscription reads that gap back itself.
        known = self.positions.setdefault(key, position)
        subscription.behind = entry_order(known) > entry_order(position)
        self.followers.setdefault(key, set()).add(subscription)
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run(client))
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        followers = self.followers.get(subscription.key)
        if followers is not None:
            followers.discard(subscription)
            if not followers:
                del self.followers[subscription.key]
                del self.positions[subscription.key]

    async def _run(self, client: aredis.Redis) -> None:
        """Read every followed feed until none is; then close the connections."""
        try:
            while self.followers:
                streams: dict[Any, Any] = dict(self.positions)
                try:
                    reply: Any = await client.xread(streams, count=200, block=BLOCK_MS)
                except RedisError:
                    # The followers carry on from SQL (their status and missed-rows
                    # checks) and get the feed's entries once Redis answers again.
                    log.warning("reading the live feeds failed; retrying", exc_info=True)
                    await asyncio.sleep(RETRY_AFTER_ERROR)
                    continue
                for key, entries in reply or []:
                    if key not in self.positions:
                        continue  # no longer followed
                    self.positions[key] = entries[-1][0]
                    for subscription in self.followers.get(key, ()):
                        subscription.deliver(entries)
        finally:
            # Synchronously, before the await below: a follower that comes now starts a
            # new reader with new connections rather than joining one that is closing.
            self.task, self.client = None, None
            await client.aclose()


# One hub per event loop: redis.asyncio's connections belong to the loop that made them.
_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FeedHub] = weakref.WeakKeyDictionary()


def feed_hub() -> FeedHub:
    """The running event loop's hub."""
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = FeedHub(get_settings().redis_url)
    return hub
