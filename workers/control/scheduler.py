"""The scheduler process: the single active placer, the metrics ingester, the MLflow exporter,
the webhook sender.

Leadership is a Redis lock; only the holder runs passes, so one placement pass
runs at a time however many scheduler processes are started. Each term of leadership
takes a fencing token from SQL, and every transaction the leader commits checks it
(services/cluster/fencing.py): a leader that stalled past its lock's expiry and resumed
after another took over has its next transaction refused, sends nothing from it, and
steps down (workers/control/term.py). The loop blocks
on the events stream, so a submission (the api appends a `wake` event) or a
replica exit is acted on within milliseconds, and runs a full pass at least
every SCHEDULER_INTERVAL seconds. A burst of events shares passes: after each pass
the leader rests as long as it took (at least 50 ms) before the next (pacing.py).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from redis.exceptions import LockNotOwnedError

from services.cluster import gangs, stragglers, watchdog
from services.cluster.arrivals import Arrivals
from services.cluster.fencing import Fence, Fenced, begin_term
from services.cluster.nodes import NodeRows
from services.cluster.placement_digest import PlacementMemo
from services.db import database_unreachable
from services.models import utcnow
from services.scheduling import scheduler_pass
from services.settings import Settings, get_settings
from services.startup_objects import freeze_startup_objects
from services.wire.client import get_redis
from services.wire.contract import WireError
from services.wire.events import ReplicaExited
from services.wire.generation import Generation
from services.wire.keys import (
    EVENTS_STREAM,
    SCHEDULER_LOCK,
    SCHEDULER_PASS,
)
from services.wire.replica import Dispatcher
from services.wire.signing import Keyring, Refused
from workers.control.beats import read_heartbeats, read_output, read_progress
from workers.control.dispatch import publish_attempts
from workers.control.events import apply_event, trusted_event
from workers.control.ingest import (
    LOGS,
    METRICS,
    POINTS_BEFORE_EXIT,
    ingest_while,
    points_first,
)
from workers.control.pacing import PassPacer
from workers.control.refusals import Refusals
from workers.control.streams import GroupReader
from workers.control.term import Term
from workers.control.tracking import export_while
from workers.control.webhooks import send_while

log = logging.getLogger("cohort.scheduler")


@contextmanager
def cycles_collected_after() -> Iterator[None]:
    """Python's cycle collector paused for the block, as it was after. A pass makes
    hundreds of thousands of objects (rows, requests, placements, messages), most freed
    at once by their counts; the collector, run every 700 allocations, walked the
    process's every live object again and again meanwhile, a fifth of a big pass's CPU.
    What the pass leaves in cycles (ORM objects, its session) goes at the next
    collection after it."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Scheduler:
    def __init__(
        self, settings: Settings, client: redis.Redis, dispatcher: Dispatcher, keyring: Keyring
    ) -> None:
        self.settings = settings
        self.redis = client
        self.dispatcher = dispatcher
        self.keyring = keyring  # every node's key, to check what nodes send
        self.refusals = Refusals(client)
        self.stopping = threading.Event()
        self.lock_ttl = settings.SCHEDULER_LOCK_TTL
        self.lock = client.lock(SCHEDULER_LOCK, timeout=self.lock_ttl, thread_local=False)
        self.points_before_exit = POINTS_BEFORE_EXIT  # the longest an exit waits for them
        self.generation = Generation()  # Redis' data (services/wire/generation.py)
        self._new_term()

    def _new_term(self) -> None:
        """Forget what an earlier term saw. A term begins when the lock was free: Redis may
        have lost its data (a wipe erases the lock too) while another scheduler led or none
        did, unseen by this one, so the term starts by making good what a wipe undoes."""
        # The current-attempt keys are written again, and the silence a wipe caused is
        # excused, in the first pass that commits (`run_pass`); a standby that takes over
        # after a wipe never saw the old marker, so `Generation.check` cannot tell it.
        self.unheard = True
        # The events as this term reads them (each read takes what is pending first, an
        # earlier term's too); kept so the consumer group is made once a term.
        self.events = GroupReader(self.redis, EVENTS_STREAM, count=200)
        # Arrivals are timed from this term's first read: what was read in an earlier term
        # (or by another leader) says nothing of what arrived in between.
        self.node_arrivals: Arrivals[str] = Arrivals()
        self.progress_arrivals: Arrivals[str] = Arrivals()
        self.output_arrivals: Arrivals[str] = Arrivals()
        # What this term's last idle pass left (services/cluster/placement_digest.py).
        self.placement_memo = PlacementMemo()
        # The stragglers' figures this term has read (services/cluster/stragglers.py).
        self.busy_window = stragglers.BusyWindow()
        # The beating nodes' rows as this term's last committed pass left them
        # (services/cluster/nodes.record_heartbeats): a new term reads them from SQL.
        self.node_rows: NodeRows = {}
        # The exits the last pass's beats listed: (node, replica key).
        self.beat_exits: set[tuple[str, tuple[int, int, int]]] = set()

    def run_pass(self, fence: Fence) -> None:
        """One pass in one fenced transaction, then its messages.

        Raises:
            Fenced: a newer leader took over; nothing was written or sent.
        """
        with cycles_collected_after():
            self._run_pass(fence)

    def _run_pass(self, fence: Fence) -> None:
        if self.generation.check(self.redis):
            log.warning("Redis lost its data: writing the current attempts again")
            self.unheard = True
        if self.unheard:
            self.restore_attempts(fence)
        heartbeats = read_heartbeats(self.redis, self.keyring, self.refusals, self.node_arrivals)
        # An agent lists a replica's exit in its beats from before it publishes the exit's
        # event (it reaps the job's leftovers in between), and the pass records an exit a
        # beat lists: the replica's last points, shipped before either, are stored first,
        # as for the event (the drained gang's saved step was refused again so).
        exits = {(beat.node_id, key) for beat in heartbeats for key in beat.exited}
        if exits - self.beat_exits:
            points_first(self.redis, self.points_before_exit, "exits heartbeats list")
        self.beat_exits = exits
        progress = read_progress(self.redis, self.progress_arrivals)
        output = read_output(self.redis, self.output_arrivals)
        with fence.scope() as session:
            if self.unheard:  # beats Redis held may be gone: their senders are not silent
                watchdog.excuse_silence(session=session, now=utcnow())
            result = scheduler_pass.run_pass(
                session=session,
                settings=self.settings,
                heartbeats=heartbeats,
                progress=progress,
                output=output,
                memo=self.placement_memo,
                busy=self.busy_window,
                # excuse_silence rewrote the nodes' times
                known_nodes=None if self.unheard else self.node_rows,
            )
        self.placement_memo.committed()
        self.node_rows = result.node_rows
        # Both done and committed: a pass that failed before here does them again.
        self.unheard = False
        # Committed above; only now may the agents hear about it.
        self.dispatcher.send(result.messages)
        self.redis.set(SCHEDULER_PASS, repr(time.time()))  # for `cohort health scheduler`
        if result.placed:
            log.info("placed jobs %s", result.placed)
        if result.lost_nodes:
            log.warning("nodes lost: %s", result.lost_nodes)

    def restore_attempts(self, fence: Fence) -> None:
        """Write every placed or running job's current attempt from SQL: the keys that
        let agents refuse a stale start are gone if Redis lost its data.

        Raises:
            Fenced: a newer leader took over.
            redis.RedisError: not written; the next pass tries again.
        """
        with fence.scope() as session:
            attempts = gangs.current_attempts(session=session)
        if not publish_attempts(self.redis, attempts):
            raise redis.ConnectionError("could not write the current attempts")

    def handle_events(self, block_ms: int, fence: Fence) -> int:
        """Read and apply agent events; returns how many were read.

        Raises:
            Fenced: a newer leader took over; the event stays unacknowledged, for it.
        """
        handled = 0
        for entries in self.events.batches(block_ms):
            if any(fields.get("kind") == ReplicaExited.KIND for _, fields in entries):
                # The replicas' last points, shipped before their exits, stored first.
                points_first(self.redis, self.points_before_exit, "replica exits")
            for entry_id, fields in entries:
                try:
                    messages = apply_event(trusted_event(fields, self.keyring), fence)
                    self.dispatcher.send(messages)
                except Fenced:
                    raise
                except Refused as exc:  # logged once a minute per kind and reason
                    self.refusals.note(
                        exc.reason,
                        f"a {str(fields.get('kind'))[:64]!r} event",
                        f"{entry_id}: {exc}",
                    )
                except WireError as exc:
                    log.warning("ignoring malformed event %s: %s", entry_id, exc)
                except Exception as exc:
                    if database_unreachable(exc):
                        # Left unacknowledged: the next read starts with it again (its
                        # own pending entries first), once SQL answers.
                        raise
                    log.exception("event %s %r could not be applied", entry_id, fields)
                self.events.ack(entry_id)
                handled += 1
        return handled

    def lead(self) -> None:
        """Take a fencing token, then run passes while holding the lock; return when the
        term ends (the lock lost, the token refused) or we stop."""
        try:
            term = Term(begin_term(lease=self.lock_ttl))
        except Exception:  # SQL unreachable: no token, no leading; the lock is released
            log.exception("could not take a fencing token; retrying")
            self.stopping.wait(1.0)
            return
        log.info("scheduler is the leader (fencing token %d)", term.fence.token)
        self._new_term()
        # The leader alone ingests metrics too: one consumer, no duplicate reads.
        ingesters = [
            threading.Thread(
                target=ingest_while,
                args=(self.redis, feed, term),
                daemon=True,
                name=f"ingest-{feed.kind}",
            )
            for feed in (METRICS, LOGS)
        ]
        # And exports runs to MLflow, in a thread of its own (workers/control/tracking.py).
        ingesters.append(
            threading.Thread(
                target=export_while,
                args=(self.redis, term, self.settings),
                daemon=True,
                name="mlflow-export",
            )
        )
        # And sends webhooks' deliveries (workers/control/webhooks.py).
        ingesters.append(
            threading.Thread(
                target=send_while, args=(term, self.settings), daemon=True, name="webhooks"
            )
        )
        for thread in ingesters:
            thread.start()
        try:
            self._lead_loop(term)
        except Fenced as exc:
            term.step_down(str(exc))
        except KeyboardInterrupt:  # SIGTERM or Ctrl-C: the process is going away
            self.stopping.set()
            raise
        finally:
            term.leading.clear()
            # A next term waits for the ingesters to end their blocking read (up to half
            # a second). A process that stops does not: what they read and did not
            # acknowledge stays pending for the next leader, as after a kill -9.
            for thread in ingesters:
                thread.join(timeout=0 if self.stopping.is_set() else 5)

    def _lead_loop(self, term: Term) -> None:
        pacer = PassPacer(self.settings.SCHEDULER_INTERVAL)
        while not self.stopping.is_set() and term.leading.is_set():
            try:
                self.lock.extend(self.lock_ttl, replace_ttl=True)
            except LockNotOwnedError:
                term.step_down("lost the scheduler lock")
                return
            try:
                # Wait for events no longer than until the next pass is due; a burst of
                # them is applied as it comes and joins one pass (pacing.py).
                # (1 ms at least: a block of 0 would wait for ever.)
                if self.handle_events(
                    block_ms=max(1, round(pacer.due_in() * 1000)), fence=term.fence
                ):
                    pacer.want()
                if pacer.due_in() == 0:
                    pacer.started()
                    try:
                        self.run_pass(term.fence)
                    finally:
                        pacer.finished()
            except (redis.RedisError, Fenced):
                raise  # the lock may be gone with Redis, or another leads: not this term
            except Exception:
                # A database hiccup must not end the leader: SQL holds the truth,
                # and the next pass starts from it again.
                log.exception("scheduling pass failed; retrying")
                pacer.want()
                self.stopping.wait(1.0)

    def run(self) -> None:
        """Wait for leadership, lead, repeat until stopped."""
        while not self.stopping.is_set():
            try:
                if self.lock.acquire(blocking=True, blocking_timeout=self.lock_ttl):
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
    scheduler = Scheduler(
        settings, get_redis(), CeleryDispatcher(app, get_redis(), keyring), keyring
    )
    freeze_startup_objects()  # imports done, the Celery app built
    try:
        scheduler.run()
    except KeyboardInterrupt:
        pass
    finally:
        scheduler.stopping.set()
