"""The scheduler process: the single active placer and reconciler, and the metrics ingester.

Leadership is a Redis lock; only the holder runs passes, so one placement pass
runs at a time however many scheduler processes are started. The loop blocks
on the events stream, so a submission (the api appends a `wake` event) or a
replica exit is acted on within milliseconds, and runs a full pass at least
every SCHEDULER_INTERVAL seconds.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time

import redis

from services.cluster import gangs, reconcile
from services.cluster.nodes import Heartbeat
from services.db import session_scope
from services.models import Job
from services.settings import Settings, get_settings
from services.wire.bus import (
    EVENTS_STREAM,
    NODES_HASH,
    PROGRESS_HASH,
    SCHEDULER_LOCK,
    get_redis,
)
from services.wire.messages import Dispatcher, Message
from workers.control.ingest import LOGS, METRICS, ingest_while
from workers.control.streams import GroupReader

log = logging.getLogger("cohort.scheduler")

LOCK_TTL = 10.0
PROGRESS_FORGET = 3600.0  # seconds


def _ts(value: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(float(value), dt.UTC)


def read_heartbeats(client: redis.Redis) -> list[Heartbeat]:
    """The last heartbeat of every agent."""
    beats = []
    for raw in client.hgetall(NODES_HASH).values():
        try:
            data = json.loads(raw)
            running = frozenset(_key(k) for k in data.get("replicas", []))
            exited = {_key(k): int(code) for *k, code in data.get("exited", [])}
            beats.append(Heartbeat(node_id=str(data["node_id"])[:64],
                                   address=str(data["address"])[:128],
                                   slots=int(data["slots"]), gpus=int(data.get("gpus", 0)),
                                   at=_ts(data["ts"]), running=running, exited=exited,
                                   gpu_ids=tuple(int(g) for g in data.get("gpu_ids", [])[:64]),
                                   busy_ports=frozenset(
                                       int(p) for p in data.get("busy_ports", [])[:2000]),
                                   port_space=str(data.get("port_space", ""))[:128]))
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring malformed heartbeat %r", raw[:200])
    return beats


def _key(parts: list[object]) -> tuple[int, int, int]:
    job_id, attempt, index = (int(p) for p in parts)  # type: ignore[call-overload]
    return job_id, attempt, index


def read_progress(client: redis.Redis) -> dict[tuple[int, int, int], float]:
    """The last progress heartbeat of every replica that sent one.

    A running replica beats every second, so an entry older than PROGRESS_FORGET
    belongs to a replica long finished: it is removed, or the hash read on every
    pass would grow with every replica ever run.
    """
    progress, stale = {}, []
    cutoff = time.time() - PROGRESS_FORGET
    for field, value in client.hgetall(PROGRESS_HASH).items():
        try:
            key, beat = _key(field.split(":")), float(value)
        except (ValueError, TypeError):
            stale.append(field)
            continue
        progress[key] = beat
        if beat < cutoff:
            stale.append(field)
    if stale:
        client.hdel(PROGRESS_HASH, *stale)
    return progress


def apply_event(kind: str, data: dict[str, object]) -> list[Message]:
    """Apply one agent event in its own transaction; returns the messages it calls for."""
    if kind not in ("replica_started", "replica_exited"):
        return []  # `wake` and unknown kinds only trigger a pass
    job_id, attempt, index = int(data["job_id"]), int(data["attempt"]), int(data["index"])
    at = _ts(data.get("ts", time.time()))
    with session_scope() as session:
        if kind == "replica_started":
            replica = gangs.record_replica_started(session=session, job_id=job_id,
                                                   attempt=attempt, index=index,
                                                   pid=int(data["pid"]), at=at)
        else:
            replica = gangs.record_replica_exited(session=session, job_id=job_id,
                                                  attempt=attempt, index=index,
                                                  exit_code=int(data["exit_code"]),
                                                  log_tail=str(data.get("log_tail", "")), at=at)
        if replica is None:
            return []
        job = session.get(Job, job_id)
        return gangs.settle_job(session=session, job=job) if job else []


class Scheduler:
    def __init__(self, settings: Settings, client: redis.Redis, dispatcher: Dispatcher) -> None:
        self.settings = settings
        self.redis = client
        self.dispatcher = dispatcher
        self.stopping = threading.Event()
        self.lock = client.lock(SCHEDULER_LOCK, timeout=LOCK_TTL, thread_local=False)
        self.leading = threading.Event()
        self.events = GroupReader(client, EVENTS_STREAM, count=200)

    def run_pass(self) -> None:
        heartbeats = read_heartbeats(self.redis)
        progress = read_progress(self.redis)
        with session_scope() as session:
            result = reconcile.run_pass(session=session, settings=self.settings,
                                         heartbeats=heartbeats, progress=progress)
        # Committed above; only now may the agents hear about it.
        self.dispatcher.send(result.messages)
        if result.placed:
            log.info("placed jobs %s", result.placed)
        if result.lost_nodes:
            log.warning("nodes lost: %s", result.lost_nodes)

    def handle_events(self, block_ms: int) -> int:
        """Read and apply agent events; returns how many were read."""
        handled = 0
        for entries in self.events.batches(block_ms):
            for entry_id, fields in entries:
                try:
                    messages = apply_event(fields.get("kind", ""),
                                           json.loads(fields.get("data", "{}")))
                    self.dispatcher.send(messages)
                except Exception:
                    log.exception("event %s %r could not be applied", entry_id, fields)
                self.events.ack(entry_id)
                handled += 1
        return handled

    def lead(self) -> None:
        """Run passes while holding the lock; return when it is lost or we stop."""
        # The leader alone ingests metrics too: one consumer, no duplicate reads.
        self.leading.set()
        ingesters = [threading.Thread(target=ingest_while, args=(self.redis, feed, self.leading),
                                      daemon=True, name=f"ingest-{feed.kind}")
                     for feed in (METRICS, LOGS)]
        for thread in ingesters:
            thread.start()
        try:
            self._lead_loop()
        finally:
            self.leading.clear()
            for thread in ingesters:
                thread.join(timeout=5)

    def _lead_loop(self) -> None:
        last_pass = 0.0
        while not self.stopping.is_set():
            if not self.lock.extend(LOCK_TTL, replace_ttl=True):
                log.warning("lost the scheduler lock")
                return
            try:
                handled = self.handle_events(
                    block_ms=int(self.settings.SCHEDULER_INTERVAL * 1000))
                now = time.monotonic()
                if handled or now - last_pass >= self.settings.SCHEDULER_INTERVAL:
                    self.run_pass()
                    last_pass = now
            except redis.RedisError:
                raise  # the lock may be gone with Redis: back to acquiring it
            except Exception:
                # A database hiccup must not end the leader: SQL holds the truth,
                # and the next pass starts from it again.
                log.exception("scheduling pass failed; retrying")
                self.stopping.wait(1.0)

    def run(self) -> None:
        """Wait for leadership, lead, repeat until stopped."""
        while not self.stopping.is_set():
            try:
                if self.lock.acquire(blocking=True, blocking_timeout=LOCK_TTL):
                    log.info("scheduler is the leader")
                    try:
                        self.lead()
                    finally:
                        try:
                            self.lock.release()
                        except Exception:  # expired or taken: nothing to release
                            pass
            except redis.RedisError as exc:
                log.warning("redis unavailable (%s); retrying", exc)
                self.stopping.wait(1.0)


def run_scheduler(settings: Settings | None = None) -> None:
    """Run a scheduler process until interrupted."""
    from workers.celery_app import app
    from workers.control.dispatch import CeleryDispatcher

    settings = settings or get_settings()
    scheduler = Scheduler(settings, get_redis(), CeleryDispatcher(app, get_redis()))
    try:
        scheduler.run()
    except KeyboardInterrupt:
        pass
    finally:
        scheduler.stopping.set()
