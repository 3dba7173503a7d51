"""The leader's log ingest, and the live-feed publishing shared with the metric ingest.

Runs in the scheduler leader next to `ingest_metrics_once`: reads agents' log batches
from `cohort:logs` through the scheduler's consumer group, stores each line once in
SQL, acknowledges only after the commit, and then publishes the new rows to the job's
live feed (services/live.py) for the SSE clients.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis

from services import live, logs
from services.db import session_scope

log = logging.getLogger("cohort.ingest")


def publish_live(client: redis.Redis, kind: str, rows: list[dict[str, Any]]) -> None:
    """Publish committed rows to the live feeds; a failure costs live viewers only."""
    try:
        live.publish(client, kind, rows)
    except redis.RedisError as exc:
        # SQL holds the rows: a reconnecting client reads them from there.
        log.warning("could not publish %d %s rows to live feeds: %s", len(rows), kind, exc)


def ingest_logs_once(client: redis.Redis, block_ms: int = 1000, count: int = 500) -> int:
    """Store one read of log batches in SQL, then acknowledge them; returns lines stored."""
    from workers.scheduler import CONSUMER, GROUP, ensure_group

    ensure_group(client, live.LOGS_STREAM, GROUP)
    stored = 0
    for start in ("0", ">"):
        reply = client.xreadgroup(GROUP, CONSUMER, {live.LOGS_STREAM: start}, count=count,
                                  block=None if start == "0" else block_ms)
        for _stream, entries in reply or []:
            if not entries:
                continue
            rows = []
            for _entry_id, fields in entries:
                try:
                    rows.extend(logs.parse_log_batch(fields.get("data", "{}")))
                except (ValueError, KeyError, TypeError):
                    log.warning("dropping malformed log batch %r", str(fields)[:200])
            with session_scope() as session:
                new_rows = logs.insert_lines(session=session, rows=rows)
            stored += len(new_rows)
            publish_live(client, "log", new_rows)
            client.xack(live.LOGS_STREAM, GROUP, *[entry_id for entry_id, _ in entries])
    return stored


def ingest_logs_while(client: redis.Redis, leading: threading.Event) -> None:
    """Ingest log lines until `leading` is cleared."""
    while leading.is_set():
        try:
            ingest_logs_once(client, block_ms=500)
        except Exception:
            log.exception("log ingest failed; retrying")
            time.sleep(1.0)
