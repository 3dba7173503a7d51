"""Live feeds: what the ingester publishes after each commit, for SSE clients to follow.

After the scheduler leader commits a batch of metric points or log lines it appends
the new rows, with their SQL ids, to the job's own Redis stream `cohort:live:<job>`
(entries as services/wire/feed.py defines them).
Each SSE client reads that stream with its own cursor (XREAD), so a slow client never
holds up the ingester or another client; SQL stays the source of truth and the ids
let a client merge history and live feed without gaps or duplicates. Ingest counters
go to one Redis hash, for the api's Prometheus `/metrics`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import redis

from services.wire.feed import ROW_TYPES, UNPLACED, Place, encode_entry
from services.wire.keys import STATS_HASH, live_key

LIVE_MAXLEN = 20_000  # entries per job kept for live readers; older ones are read from SQL
LIVE_TTL = 3600  # seconds a job's feed outlives its last entry


def publish(
    client: redis.Redis, kind: str, rows: list[tuple[Any, ...]], places: dict[int, Place]
) -> None:
    """Append newly committed `metric` or `log` rows to their jobs' feeds; count them.
    `rows`: in id order, each the job's id then the row's fields in its row type's order
    (services/telemetry/metrics.py and logs.py: STORED), one pipeline for all jobs.

    `places[job]` says where the job's rows stand in its stream (its newest rows of each
    kind and status change stored before these). A reader that has not had all of those
    has missed something (an entry lost with a Redis restart, a publish that failed after
    its commit) and reads it from SQL first; a lost entry with none after it is found when
    the feed has been quiet a while (services/telemetry/follow.py).
    """
    if not rows:
        return
    if kind not in ROW_TYPES:
        raise ValueError(f"unknown feed kind {kind!r}")
    by_job: dict[int, list[tuple[Any, ...]]] = defaultdict(list)
    for row in rows:
        by_job[row[0]].append(row[1:])
    pipe = client.pipeline(transaction=False)
    for job_id, items in by_job.items():
        key = live_key(job_id)
        fields = encode_entry(kind, items, places.get(job_id, UNPLACED))
        pipe.xadd(key, fields, maxlen=LIVE_MAXLEN, approximate=True)
        pipe.expire(key, LIVE_TTL)
    pipe.hincrby(STATS_HASH, f"{kind}_rows", len(rows))
    pipe.execute()


def read_stats(client: redis.Redis) -> dict[str, int]:
    """The ingest counters (rows stored since Redis started)."""
    return {str(k): int(v) for k, v in client.hgetall(STATS_HASH).items()}
