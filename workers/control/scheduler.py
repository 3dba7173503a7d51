"""The scheduler process: the single active placer and reconciler, and the metrics ingester.

Leadership is a Redis lock; only the holder runs passes, so one placement pass
runs at a time however many scheduler processes are started. The loop blocks
on the events stream, so a submission (the api appends a `wake` event) or a
replica exit is acted on within milliseconds, and runs a full pass at least
every SCHEDULER_INTERVAL seconds.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time

import redis
from sqlalchemy.orm import Session

from services.cluster import gangs, reconcile
from services.cluster.nodes import Heartbeat, heartbeat_of
from services.db import session_scope
from services.models import Job
from services.settings import Settings, get_settings
from services.wire.batches import ProgressBeat
from services.wire.client import get_redis
from services.wire.contract import WireError
from services.wire.events import (
    Event,
    NodeHeartbeat,
    ReplicaExited,
    ReplicaRestarted,
    ReplicaStarted,
    Wake,
    decode_event,
)
from services.wire.keys import (
    EVENTS_STREAM,
    NODES_HASH,
    PROGRESS_HASH,
    SCHEDULER_LOCK,
    SCHEDULER_LOCK_TTL,
    SCHEDULER_PASS,
)
from services.wire.replica import Dispatcher, Message
from services.wire.signing import HEARTBEAT, Keyring, Refused, unseal, verify_event
from workers.control.ingest import LOGS, METRICS, ingest_while
from workers.control.refusals import Refusals
from workers.control.streams import GroupReader

log = logging.getLogger("cohort.scheduler")

LOCK_TTL = SCHEDULER_LOCK_TTL
PROGRESS_FORGET = 3600.0  # seconds


def read_heartbeats(client: redis.Redis, keyring: Keyring, refusals: Refusals
                    ) -> list[Heartbeat]:
    """The last heartbeat of every agent, each signed with its node's key: a node without
    its credential is not registered (nor kept alive)."""
    beats = []
    for field, value in client.hgetall(NODES_HASH).items():
        node_id, raw = str(field), str(value)  # a decoding client (get_redis)
        try:
            sealed = unseal(raw, keyring.node(node_id), purpose=HEARTBEAT, node_id=node_id)
            beat = NodeHeartbeat.decode(sealed.body)
            if beat.node_id != node_id:
                raise Refused("another node", f"it names node {beat.node_id!r}")
            beats.append(heartbeat_of(beat))
        except Refused as exc:
            refusals.heartbeat(node_id, raw, exc.reason, str(exc))
        # WireError is a ValueError, as is a `ts` past the year 9999.
        except (ValueError, OverflowError, OSError) as exc:
            log.warning("ignoring malformed heartbeat %r: %s", raw[:200], exc)
    return beats


def trusted_event(fields: dict[str, str], keyring: Keyring) -> Event:
    """The event in a stream entry, if the node it names signed it (a `wake` needs no
    signature: it only asks for a pass).

    Raises:
        WireError: malformed.
        Refused: a node's event without its node's signature.
    """
    event = decode_event(fields)
    if not isinstance(event, Wake):  # every other kind, present or future: a node's
        node_id = str(getattr(event, "node_id", ""))
        verify_event(keyring.node(node_id), node_id, fields)
    return event


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
            beat = ProgressBeat.decode(str(field), str(value))
        except WireError:
            stale.append(field)
            continue
        progress[beat.job_id, beat.attempt, beat.index] = beat.until
        if beat.until < cutoff:
            stale.append(field)
    if stale:
        client.hdel(PROGRESS_HASH, *stale)
    return progress


def _from_its_node(session: Session, event: ReplicaStarted | ReplicaExited | ReplicaRestarted
                   ) -> None:
    """Refuse a report about a replica from any node but the one SQL placed it on (a
    node's key proves who sent it, not that the replica is its own)."""
    runs_on = gangs.replica_node(session=session, job_id=event.job_id,
                                 attempt=event.attempt, index=event.index)
    if runs_on is not None and runs_on != event.node_id:
        raise Refused("another node", f"{event.KIND} of replica {event.job_id}/"
                      f"{event.attempt}/{event.index} from node {event.node_id!r}, "
                      f"which runs on {runs_on!r}")


def apply_event(event: Event) -> list[Message]:
    """Apply one agent event in its own transaction; returns the messages it calls for.

    Raises:
        Refused: the event is about a replica that another node runs.
    """
    if isinstance(event, ReplicaRestarted):
        with session_scope() as session:
            _from_its_node(session, event)
            gangs.record_replica_restarted(session=session, job_id=event.job_id,
                                           attempt=event.attempt, index=event.index,
                                           pid=event.pid, restarts=event.restarts)
        return []  # the gang goes on: nothing to settle
    if not isinstance(event, ReplicaStarted | ReplicaExited):
        return []  # a `wake` only triggers a pass
    at = dt.datetime.fromtimestamp(event.ts, dt.UTC)
    with session_scope() as session:
        _from_its_node(session, event)
        if isinstance(event, ReplicaStarted):
            replica = gangs.record_replica_started(session=session, job_id=event.job_id,
                                                   attempt=event.attempt, index=event.index,
                                                   pid=event.pid, at=at)
        else:
            replica = gangs.record_replica_exited(session=session, job_id=event.job_id,
                                                  attempt=event.attempt, index=event.index,
                                                  exit_code=event.exit_code,
                                                  log_tail=event.log_tail, at=at)
        if replica is None:
            return []
        job = session.get(Job, event.job_id)
        return gangs.settle_job(session=session, job=job) if job else []


class Scheduler:
    def __init__(self, settings: Settings, client: redis.Redis, dispatcher: Dispatcher,
                 keyring: Keyring) -> None:
        self.settings = settings
        self.redis = client
        self.dispatcher = dispatcher
        self.keyring = keyring  # every node's key, to check what nodes send
        self.refusals = Refusals(client)
        self.stopping = threading.Event()
        self.lock = client.lock(SCHEDULER_LOCK, timeout=LOCK_TTL, thread_local=False)
        self.leading = threading.Event()
        self.events = GroupReader(client, EVENTS_STREAM, count=200)

    def run_pass(self) -> None:
        heartbeats = read_heartbeats(self.redis, self.keyring, self.refusals)
        progress = read_progress(self.redis)
        with session_scope() as session:
            result = reconcile.run_pass(session=session, settings=self.settings,
                                         heartbeats=heartbeats, progress=progress)
        # Committed above; only now may the agents hear about it.
        self.dispatcher.send(result.messages)
        self.redis.set(SCHEDULER_PASS, repr(time.time()))  # for `cohort health scheduler`
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
                    messages = apply_event(trusted_event(fields, self.keyring))
                    self.dispatcher.send(messages)
                except Refused as exc:  # logged once a minute per kind and reason
                    self.refusals.note(exc.reason, f"a {str(fields.get('kind'))[:64]!r} event",
                                       f"{entry_id}: {exc}")
                except WireError as exc:
                    log.warning("ignoring malformed event %s: %s", entry_id, exc)
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
    keyring = Keyring(settings.SIGNING_KEY)  # MissingKey: the CLI says so in one line
    scheduler = Scheduler(settings, get_redis(), CeleryDispatcher(app, get_redis(), keyring),
                          keyring)
    try:
        scheduler.run()
    except KeyboardInterrupt:
        pass
    finally:
        scheduler.stopping.set()
