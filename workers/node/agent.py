"""The node agent: heartbeats, starts and stops replica processes, reports their exits.

One agent per machine. It consumes only its own Celery queue (`node.<id>`), with a
thread pool so that tasks run in this process, next to the processes they start.
It talks to the control plane through Redis alone (no SQL credentials).
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple

import redis

from services.settings import Settings, get_settings
from services.wire import acl
from services.wire.client import get_redis, publish_node_event
from services.wire.clock import RedisClock
from services.wire.events import NodeHeartbeat, ReplicaRestarted, ReplicaStarted
from services.wire.generation import Generation
from services.wire.keys import NODES_HASH, claim_key, node_queue
from services.wire.replica import CleanupJob, StartReplica, StopReplica
from services.wire.signing import HEARTBEAT, check_node_key, seal
from workers import layout
from workers.node import (
    admission,
    data_dir_lock,
    gpus,
    isolation,
    leftovers,
    ports,
    respawn,
)
from workers.node.attempts import current_attempt
from workers.node.bundle_cache import BundleUnavailable
from workers.node.environment import CommandNotFound
from workers.node.exits import (
    BUNDLE_REFUSED_EXIT,
    INTERRUPTED_START_EXIT,
    POLICY_REFUSED_EXIT,
    PORT_TAKEN_EXIT,
    SPAWN_NOT_FOUND_EXIT,
    ExitReports,
    exit_code_of,
    fetch_exit_code,
    spawn_exit_code,
)
from workers.node.launcher import ReplicaKey, ReplicaProcess, spawn, tail
from workers.node.lease import CHECK_EVERY, Lease, fence_grace
from workers.node.logship import LogShipper
from workers.node.pool import ReplicaPool
from workers.node.prepare import Preparer
from workers.node.sidecar import Sidecars
from workers.replay import AfterEnd

if TYPE_CHECKING:
    from celery import Celery

log = logging.getLogger("cohort.agent")

_agent: Agent | None = None
_data_dir_lock: IO[str] | None = None  # this process's hold on DATA_DIR (run_agent)

CLAIM_TTL = 30 * 86400  # seconds: far past any message's redelivery

# Celery's worker loop notices a SIGTERM when its poll returns, and with nothing else
# scheduled that poll waits a second: a tick this often bounds how long a stop waits.
STOP_TICK = 0.1


def current_agent() -> Agent:
    """The agent of this process (set by run_agent before the worker consumes)."""
    if _agent is None:
        raise RuntimeError("no agent in this process: start it with `cohort agent`")
    return _agent


class Fenced(NamedTuple):
    """Why a start message does not start its replica here."""

    why: str
    level: int  # of the log line that says so
    # Claimed by this node's previous agent, never reported: the replica is reported as
    # exited (INTERRUPTED_START_EXIT), not ignored, so that its gang does not wait for it.
    interrupted: bool = False


class Agent:
    """Supervises the replica processes of one node."""

    def __init__(
        self,
        settings: Settings,
        client: redis.Redis,
        declare_queue: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.redis = client
        # Declares this node's queue again (its binding is a Redis key, gone with a wipe;
        # without it, messages sent to the queue are dropped): run_agent's Celery app's.
        self.declare_queue = declare_queue or (lambda: None)
        self.node_id = settings.node_id
        # Signs this node's events and heartbeats, opens the messages sent to it
        # (workers/node/inbox.py); no agent runs without it (signing.MissingKey).
        self.node_key = check_node_key(settings.NODE_KEY, self.node_id)
        # Messages are judged by Redis's clock, never this host's (services/wire/clock.py).
        self.clock = RedisClock(client)
        self.data_dir: Path = settings.data_dir
        self.processes: dict[ReplicaKey, ReplicaProcess] = {}
        self.started: set[ReplicaKey] = set()  # every key ever started here
        # Redis' data generation (services/wire/generation.py), checked under `lock`:
        # after a wipe, this node's claims are written again before any start.
        self.generation = Generation()
        self.restore_due = False  # a wipe was seen; what it erased is not written yet
        # Lost parameter_server workers started again in place (workers/node/respawn.py).
        self.respawns = respawn.Respawns(settings.PS_WORKER_RESTARTS)
        self.lock = threading.Lock()
        self.exits = ExitReports(self.node_id, self.node_key, client, self.lock)
        self.exited = self.exits.recent  # recent exits: code, when
        self.stopping = threading.Event()
        # Its right to run replicas, renewed by every heartbeat Redis takes
        # (workers/node/lease.py); `lease_loop` stops them all when it lapses.
        self.lease = Lease(settings.AGENT_LEASE)
        # The GPUs offered, and each one's model and memory (the nodes API shows them):
        # none until find_gpus has checked that the replicas' TensorFlow can use them.
        self.gpu_ids: list[int] = []
        self.gpu_models: tuple[tuple[str, int], ...] = ()
        # Replicas whose code or inputs are being fetched; set: stopped meanwhile.
        self.preparing: dict[ReplicaKey, threading.Event] = {}
        self.answering: dict[ReplicaKey, int] = {}  # start messages being handled, per key
        self.preparer = Preparer(settings)
        self.sidecars = Sidecars(settings, client)  # checkpoints, metrics from files
        # Ended replicas' senders, for a wipe of Redis just after an end (workers/replay.py).
        self.ended = AfterEnd()
        # Warm replica processes (COHORT_REPLICA_POOL_SIZE; none until start_pool).
        self.pool = ReplicaPool(
            settings.REPLICA_POOL_SIZE, self.python, self.node_id, self.data_dir
        )

    @property
    def python(self) -> str:
        """The interpreter that runs replicas."""
        return self.settings.REPLICA_PYTHON or sys.executable

    def replica_user(self, job_id: int) -> isolation.ReplicaUser | None:
        """Who job `job_id`'s replicas run as here (None: as this agent's user)."""
        return isolation.replica_user(self.settings, job_id)

    def start_pool(self) -> None:
        """Start keeping the warm replica processes (none when the pool size is 0)."""
        if not self.stopping.is_set():
            self.pool.start()

    def find_gpus(self) -> None:
        """Offer the GPUs found (NVML, COHORT_NODE_GPUS) that the replicas' TensorFlow
        sees; asking it takes seconds, so the node offers no GPU until then."""
        found = {gpu.index: gpu for gpu in gpus.discover()}
        ids = gpus.usable_gpus(
            gpus.node_gpu_ids(self.settings.NODE_GPUS, list(found)),
            self.settings.REPLICA_PYTHON or sys.executable,
            self.settings.NODE_GPU_PROBE,
        )
        models = tuple((found[i].name, found[i].memory_mb) if i in found else ("", 0) for i in ids)
        with self.lock:
            self.gpu_ids, self.gpu_models = ids, models
        if ids:
            log.info(
                "offering GPUs %s: %s",
                ids,
                ", ".join(name or "unnamed" for name, _memory in models),
            )

    # -- tasks -------------------------------------------------------------
    def start_replica(self, message: StartReplica) -> None:
        """Start a replica once; a redelivered or repeated message is ignored. A replica
        whose code or inputs must be fetched first starts on a thread of its own. Until
        it is answered, its heartbeats list it as being prepared: a restore of a large
        checkpoint is not a start left unanswered (watchdog.settle_unanswered_starts)."""
        key = ReplicaKey.of(message.spec)
        with self.lock:
            self.answering[key] = self.answering.get(key, 0) + 1
        try:
            self._start_replica(key, message)
        finally:
            with self.lock:
                self.answering[key] -= 1
                if not self.answering[key]:
                    del self.answering[key]

    def _start_replica(self, key: ReplicaKey, message: StartReplica) -> None:
        process, failure = None, None
        if (
            key not in self.started
            and not self.stopping.is_set()
            and admission.refusal(message.spec, self.settings.ALLOWED_ENTRYPOINTS) is None
        ):
            # Its directories, with their owners, before anything is fetched into them
            # (nothing for a message the policy refuses: it is answered below).
            try:
                isolation.lay_out(
                    self.data_dir, key.job_id, key.attempt, key.index, self.replica_user(key.job_id)
                )
            except OSError as exc:  # the spawn tries again, and reports it as the exit
                log.warning("cannot lay out the directories of %s: %s", key, exc)
            # Outside the lock (it may download): the claim below still decides.
            self.sidecars.prepare(message.spec)
        with self.lock:
            if key in self.started or self.stopping.is_set():
                log.info("ignoring start of %s: already started here", key)
                return
            fenced = self._fenced(key)
            if fenced is not None and not fenced.interrupted:
                log.log(fenced.level, "ignoring start of %s: %s", key, fenced.why)
                return
            self.started.add(key)
            refused = admission.refusal(message.spec, self.settings.ALLOWED_ENTRYPOINTS)
            port_taken = ports.port_problem(message.port) if message.port else None
            if fenced is not None:
                failure = INTERRUPTED_START_EXIT, fenced.why
            elif refused is not None:
                failure = POLICY_REFUSED_EXIT, refused
            elif port_taken is not None:
                failure = PORT_TAKEN_EXIT, port_taken
            elif self.preparer.needed(message.spec):
                self.preparing[key] = threading.Event()
                threading.Thread(
                    target=self._prepare_and_start,
                    args=(message,),
                    daemon=True,
                    name=f"prepare-{key.job_id}-{key.attempt}-{key.index}",
                ).start()
            else:
                process, failure = self._spawn(message)
        self._started_or_refused(key, process, failure)

    def _prepare_and_start(self, message: StartReplica) -> None:
        key = ReplicaKey.of(message.spec)
        process, failure = None, None
        try:
            self.preparer.prepare(message.spec)
        except BundleUnavailable as exc:
            failure = BUNDLE_REFUSED_EXIT, str(exc)
        except Exception as exc:  # noqa: BLE001 - the store or the disk failed: retryable
            failure = fetch_exit_code(exc), f"could not fetch the job's code or inputs: {exc}"
        with self.lock:
            cancelled = self.preparing.pop(key).is_set() or self.stopping.is_set()
            if failure is None and not cancelled:
                process, failure = self._spawn(message)
        if cancelled and failure is None:
            # Stopped while its code was fetched: nothing was started.
            self.exits.never_started(key, until_sent=True)
        self._started_or_refused(key, process, failure)

    def _spawn(self, message: StartReplica) -> tuple[ReplicaProcess | None, tuple[int, str] | None]:
        """Spawn the replica (lock held): its process, or its exit code and the reason."""
        self.sidecars.follow(ReplicaKey.of(message.spec))  # before the process writes
        try:
            process = spawn(
                message,
                self.data_dir,
                self.python,
                self.replica_user(message.spec.job_id),
                self.pool,
            )
        except CommandNotFound as exc:
            return None, (SPAWN_NOT_FOUND_EXIT, str(exc))
        except Exception as exc:  # noqa: BLE001 - any failure is this replica's exit
            return None, (spawn_exit_code(exc), f"could not start the process: {exc}")
        self.processes[process.key] = process
        self.respawns.started(process.key, message)
        return process, None

    def _started_or_refused(
        self, key: ReplicaKey, process: ReplicaProcess | None, failure: tuple[int, str] | None
    ) -> None:
        """Report a start (and supervise the process) or a refusal."""
        if failure is not None:
            self.exits.refused(key, *failure)
        if process is None:
            self.sidecars.discard(key)
            return
        log.info(
            "started %s as pid %d%s",
            key,
            process.popen.pid,
            " (a warm process)" if process.warm else "",
        )
        shipper = LogShipper(self.redis, key, process.log_path)
        shipper.start()
        self.sidecars.start(key)
        publish_node_event(
            self.redis,
            ReplicaStarted(
                self.node_id, key.job_id, key.attempt, key.index, process.popen.pid, time.time()
            ),
            self.node_key,
        )
        threading.Thread(
            target=self._watch,
            args=(process, shipper),
            daemon=True,
            name=f"watch-{key.job_id}-{key.attempt}-{key.index}",
        ).start()

    def _fenced(self, key: ReplicaKey) -> Fenced | None:
        """Fencing for at-least-once delivery (lock held): no stale attempt, never two
        processes. None: claimed here now, start it; else why not."""
        self._check_generation()  # the claims of what runs here first, after a wipe
        current = current_attempt(self.redis, key.job_id)
        if current is not None and current != key.attempt:
            return Fenced(f"attempt {current} is current", logging.INFO)
        # Compare-and-set on the replica's claim: whichever delivery gets here
        # first (on any node) starts it; every other copy of the message is ignored.
        if self._claim(self.redis, key):
            return None
        held = self.redis.get(claim_key(key.job_id, key.attempt, key.index))
        holder = held.decode() if isinstance(held, bytes) else held
        if holder == self.node_id:
            # Not in `started`: this node's previous agent claimed it, and was killed
            # before its start was reported (or its process ran at all).
            return Fenced(
                "this node's previous agent claimed it and stopped before "
                "reporting its start (the agent restarted)",
                logging.WARNING,
                interrupted=True,
            )
        # Another node started it: a copy of the message reached the wrong place, worth
        # a line at the worker's level.
        return Fenced(f"already claimed by {holder or 'a node'}", logging.WARNING)

    def _claim(self, client: Any, key: ReplicaKey) -> Any:
        """Claim replica `key` for this node unless a node holds it (SET NX): true when
        claimed here; on a pipeline, queued (its result comes with `execute`)."""
        return client.set(
            claim_key(key.job_id, key.attempt, key.index), self.node_id, nx=True, ex=CLAIM_TTL
        )

    def _check_generation(self) -> None:
        """If Redis lost its data (restarted, flushed, replaced), write again what it
        lost of this node's (lock held): its queue's binding, the claim of every replica
        started or stopped here, so no start message (a re-sent one, a redelivered one)
        starts a second copy on any node, and a `replica_started` event for each process
        running, whose first event may have been lost before the scheduler read it."""
        if self.generation.check(self.redis):
            self.restore_due = True
        if not self.restore_due:
            return
        keys = sorted(self.started, key=lambda k: (k.job_id, k.attempt, k.index))
        log.warning(
            "Redis lost its data: declaring queue %s and claiming the %d replicas "
            "started here again",
            node_queue(self.node_id),
            len(keys),
        )
        self.declare_queue()
        pipe = self.redis.pipeline(transaction=False)
        for key in keys:
            self._claim(pipe, key)
        for key, claimed in zip(keys, pipe.execute(), strict=True):
            if not claimed:  # another node's since the wipe: say so, it cannot be undone
                log.error("replica %s was claimed by another node after Redis lost its data", key)
        for process in self.processes.values():
            publish_node_event(
                self.redis,
                ReplicaStarted(
                    self.node_id,
                    process.key.job_id,
                    process.key.attempt,
                    process.key.index,
                    process.popen.pid,
                    process.started_at,
                ),
                self.node_key,
            )
        self.restore_due = False  # not before: a failure above is tried again

    def cleanup_job(self, message: CleanupJob) -> None:
        """Remove a finished job's scratch files here; its logs and saved model stay."""
        job = layout.job_dirs(self.data_dir, message.job_id)
        for path in job.scratch():
            shutil.rmtree(path, ignore_errors=True)
        isolation.retire(job.root)
        log.info("cleaned up scratch files of job %d", message.job_id)

    def stop_replica(self, message: StopReplica) -> None:
        """Stop a replica if it runs here; stopping an unknown one is not an error."""
        key = ReplicaKey(message.job_id, message.attempt, message.index)
        with self.lock:
            self.started.add(key)  # a late start message must not start it after this
            self.respawns.stopping(key)  # nor a restart in place
            process = self.processes.get(key)
            preparing = self.preparing.get(key)
            if preparing is not None:
                preparing.set()  # its fetch thread reports it, and starts nothing
                return
        if process is None:
            # Nothing runs: say so, so the control plane can settle the replica.
            self.exits.never_started(key, until_sent=False)
            return
        process.stop(message.grace_seconds)

    # -- supervision -------------------------------------------------------
    def _watch(self, process: ReplicaProcess, shipper: LogShipper | None = None) -> None:
        returncode = process.popen.wait()
        while (again := self._respawn(process, exit_code_of(returncode))) is not None:
            process = again
            returncode = process.popen.wait()
        with self.lock:
            self.respawns.ended(process.key)
        if shipper is not None:
            shipper.finish()  # the last lines go out before the exit is reported
            self.ended.keep(shipper.send_again)
        # So do the last points, checkpoint, model, TensorBoard files and the log.
        sidecar = self.sidecars.finish(process.key, process.log_path)
        if sidecar is not None:
            self.ended.keep(sidecar.reporter.send_again, sidecar.reporter.close)
        user = self.replica_user(process.key.job_id)
        code = exit_code_of(returncode)
        with self.lock:
            self.processes.pop(process.key, None)
            self.exits.note(process.key, code)  # a beat from now on lists it as exited
            # By uid, not job: two jobs a multiple of REPLICA_UID_RANGE apart share one.
            last_here = user is not None and not any(
                self.replica_user(k.job_id) == user for k in (*self.processes, *self.preparing)
            )
        if last_here:
            # Nothing of the job runs here any more: whatever its code left running
            # under its uid (a daemon outside the process group) goes too.
            isolation.reap(user, self.node_id, self.data_dir)
        self.exits.exited(process.key, code, tail(process.log_path))

    def _respawn(self, process: ReplicaProcess, code: int) -> ReplicaProcess | None:
        """Start an exited replica again in place if workers/node/respawn.py says so."""
        key = process.key
        with self.lock:
            due = self.respawns.due(key, code, stop_requested=process.stop_requested.is_set())
        if due is None or self.stopping.wait(respawn.RESPAWN_DELAY):
            return None
        message, number = due
        with self.lock:  # the process stays listed meanwhile: the heartbeat still has it
            if self.respawns.due(key, code, stop_requested=False) is None or self.stopping.is_set():
                return None  # asked to stop while it waited
            try:
                with open(process.log_path, "a", encoding="utf-8") as log_file:
                    log_file.write(respawn.log_line(code, number, self.respawns.budget))
                again = spawn(
                    message, self.data_dir, self.python, self.replica_user(key.job_id), self.pool
                )
            except Exception:  # noqa: BLE001 - then its exit is reported as it was
                log.exception("could not start %s again", key)
                return None
            self.processes[key] = again
            self.respawns.done(key, number)
        log.warning(
            "%s exited with %d: started again as pid %d (%d of %d)",
            key,
            code,
            again.popen.pid,
            number,
            self.respawns.budget,
        )
        try:
            publish_node_event(
                self.redis,
                ReplicaRestarted(
                    self.node_id,
                    key.job_id,
                    key.attempt,
                    key.index,
                    again.popen.pid,
                    code,
                    number,
                    time.time(),
                ),
                self.node_key,
            )
        except redis.RedisError as exc:  # the replica runs on; only the count is late
            log.warning("could not report the restart of %s: %s", key, exc)
        return again

    def heartbeat(self) -> None:
        """Publish this node's address, capacity and running replicas; once Redis has
        taken it, the lease runs again from the moment it was sent."""
        now = time.time()
        with self.lock:
            running = tuple((k.job_id, k.attempt, k.index) for k in self.processes)
            preparing = tuple(
                (k.job_id, k.attempt, k.index) for k in {*self.preparing, *self.answering}
            )
            exited = self.exits.recent_codes(now)
            gpu_ids, gpu_models = tuple(self.gpu_ids), self.gpu_models
        beat = NodeHeartbeat(
            node_id=self.node_id,
            address=self.settings.NODE_ADDRESS,
            slots=self.settings.NODE_SLOTS,
            ts=now,
            gpus=len(gpu_ids),
            replicas=running,
            preparing=preparing,
            exited=exited,
            gpu_ids=gpu_ids,
            gpu_models=gpu_models,
            busy_ports=tuple(
                sorted(
                    ports.listening_ports(
                        self.settings.PORT_RANGE_START, self.settings.PORT_RANGE_END
                    )
                )
            ),
            port_space=ports.port_space(),
        )
        sealed = seal(
            self.node_key, purpose=HEARTBEAT, node_id=self.node_id, body=beat.encode(), now=now
        )
        sent = self.lease.now()  # no later than Redis (and the control plane) gets it
        self.redis.hset(NODES_HASH, self.node_id, sealed)
        self.lease.renew(sent)

    def start_heartbeats(self) -> None:
        """Beat on one thread, watch the lease on another (a beat on a cut link blocks
        far longer than the lease: workers/node/lease.py)."""
        threading.Thread(target=self.heartbeat_loop, daemon=True, name="heartbeat").start()
        threading.Thread(target=self.lease_loop, daemon=True, name="lease").start()

    def heartbeat_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                self.heartbeat()
                with self.lock:
                    self._check_generation()
                self.ended.tick()
            except redis.RedisError as exc:
                log.warning("heartbeat failed: %s", exc)
            except Exception:  # noqa: BLE001 - the broker refused the queue's declaration
                log.exception("could not restore what Redis lost; trying again")
            self.stopping.wait(self.settings.HEARTBEAT_INTERVAL)

    def lease_loop(self) -> None:
        """Stop every replica whenever the lease has lapsed; sleep until it may."""
        while not self.stopping.is_set():
            left = self.lease.left()
            if left <= 0:
                self.fence()
            # A renewal only moves the end later: sleeping until the end seen is safe.
            self.stopping.wait(left if left > 0 else CHECK_EVERY)

    def fence(self) -> None:
        """The lease lapsed: stop every replica before the control plane declares this
        node lost and places the gang elsewhere (never two copies)."""
        # Read without the agent's lock: its holder may be blocked in a call to the very
        # Redis that is out of reach (a start's claim, the generation check), for longer
        # than the lease. Copying a dict is one step under the GIL; a process a start adds
        # after it is caught by the next check (the lease stays lapsed).
        processes = [p for p in self.processes.copy().values() if not p.stop_requested.is_set()]
        for cancelled in self.preparing.copy().values():
            cancelled.set()  # still fetching its code: it will not start
        if not processes:
            return
        grace = fence_grace(self.settings)
        log.error(
            "no heartbeat taken by Redis for %.0fs: stopping %d replicas (SIGKILL after %.1fs)",
            self.settings.AGENT_LEASE,
            len(processes),
            grace,
        )
        for process in processes:
            threading.Thread(
                target=process.stop,
                args=(grace,),
                daemon=True,
                name=f"fence-{process.key.job_id}-{process.key.attempt}-{process.key.index}",
            ).start()

    def shutdown(self, grace: float = 5.0) -> None:
        """Stop every replica of this node (the agent is going away)."""
        self.stopping.set()
        self.pool.shutdown()
        with self.lock:
            processes = list(self.processes.values())
        threads = [threading.Thread(target=p.stop, args=(grace,)) for p in processes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        try:
            self.redis.hdel(NODES_HASH, self.node_id)
        except redis.RedisError:
            pass


def declare_queue(app: Celery, name: str) -> None:
    """Declare Celery queue `name` (its exchange binding) on the broker, as the worker
    does when it connects: a wipe of Redis erases the binding, which a worker whose
    connection never broke does not write again."""
    with app.connection_for_write() as connection:
        app.amqp.queues[name].bind(connection.default_channel).declare()


def run_agent(settings: Settings | None = None) -> None:
    """Run this machine's agent until it is told to stop (SIGTERM / Ctrl-C)."""
    global _agent
    settings = settings or get_settings()
    from celery import signals

    from workers.celery_app import app

    # First of all: a second agent of this node on this DATA_DIR would end the first one's
    # replicas as a predecessor's leftovers (below). Held until the process ends.
    global _data_dir_lock
    _data_dir_lock = data_dir_lock.hold(settings.data_dir, settings.node_id)
    # Before consuming: a node whose replicas could not run as their own users (a uid
    # its user namespace does not map, an interpreter they cannot reach) says so now.
    isolation.check_node(settings, settings.REPLICA_PYTHON or sys.executable)
    # Before the first beat, which says what runs here: nothing of a previous agent of this
    # node still does (a frozen replica would outlive its guard's SIGTERM for seconds while
    # the scheduler, told the node runs nothing, places its gang again).
    leftovers.end_predecessors(settings.node_id, settings.data_dir)
    agent = Agent(settings, get_redis(), lambda: declare_queue(app, node_queue(settings.node_id)))
    _agent = agent
    # The heartbeat thread beats at once, and through a Redis that is away: a first beat
    # made here, unguarded, ended an agent started while Redis restarted (the chaos soak).
    agent.start_heartbeats()
    agent.start_pool()
    threading.Thread(target=agent.find_gpus, daemon=True, name="find-gpus").start()
    log.info(
        "agent %s at %s with %d slots, queue %s",
        agent.node_id,
        settings.NODE_ADDRESS,
        settings.NODE_SLOTS,
        node_queue(agent.node_id),
    )
    overlap = ports.check_range(settings.PORT_RANGE_START, settings.PORT_RANGE_END)
    if overlap:
        log.warning("%s", overlap)
    # This node's own unacknowledged-message keys, not the ones every consumer shares, and
    # no remote control (a fanout every agent would read): what the agent's Redis user
    # may touch is its own (services/wire/acl.py).
    app.conf.broker_transport_options = {
        **app.conf.broker_transport_options,
        **acl.unacked_keys(agent.node_id),
    }
    app.conf.worker_enable_remote_control = False
    worker = app.Worker(
        hostname=f"agent@{agent.node_id}",
        queues=[node_queue(agent.node_id)],
        pool="threads",
        concurrency=4,
        loglevel="WARNING",
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
    )

    def tick(sender: Any, **_: Any) -> None:  # sender: the worker's consumer
        if getattr(sender, "hub", None) is not None:  # an event loop (Redis has one)
            sender.hub.call_repeatedly(STOP_TICK, lambda: None)

    signals.worker_ready.connect(tick, weak=False)
    try:
        worker.start()
    finally:
        agent.shutdown()
