"""The node agent: starts and stops replica processes, reports their starts and exits.

One agent per machine (workers/node/agent_process.py runs it). It talks to the control
plane through Redis alone (no SQL credentials). What it does for a replica lives in
modules of its own: its claim (claims.py), its process's end (supervision.py), the
node's heartbeat and lease (heartbeat.py).
"""

from __future__ import annotations

import logging
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import redis

from services.settings import Settings
from services.wire.client import publish_node_event
from services.wire.clock import RedisClock
from services.wire.events import ReplicaStarted
from services.wire.generation import Generation
from services.wire.keys import NODES_HASH
from services.wire.replica import CleanupJob, StartReplica, StopReplica
from services.wire.signing import check_node_key
from workers import layout
from workers.node import admission, claims, heartbeat, isolation, ports, respawn, supervision
from workers.node.bundle_cache import BundleUnavailable
from workers.node.environment import CommandNotFound
from workers.node.envs import RequirementsFailed
from workers.node.exits import (
    BUNDLE_REFUSED_EXIT,
    INTERRUPTED_START_EXIT,
    POLICY_REFUSED_EXIT,
    PORT_TAKEN_EXIT,
    SPAWN_NOT_FOUND_EXIT,
    ExitReports,
    fetch_exit_code,
    spawn_exit_code,
)
from workers.node.launcher import ReplicaKey, ReplicaProcess, spawn
from workers.node.lease import Lease
from workers.node.logship import LogShipper
from workers.node.pool import ReplicaPool
from workers.node.pool_size import PoolSize
from workers.node.prepare import Preparer
from workers.node.replay import AfterEnd
from workers.node.sidecar import Sidecars

log = logging.getLogger("cohort.agent")


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
        # Signs this node's events and beats, opens its messages (workers/node/inbox.py).
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
        # (workers/node/lease.py); heartbeat.lease_loop stops them all when it lapses.
        self.lease = Lease(settings.AGENT_LEASE)
        # The GPUs offered, and each one's model and memory (the nodes API shows them):
        # none until find_gpus has checked that the replicas' TensorFlow can use them.
        self.gpu_ids: list[int] = []
        self.gpu_models: tuple[tuple[str, int], ...] = ()
        # Until find_gpus is done the beats say so, and the control plane offers this
        # node to no job (a node beating "0 GPUs" meanwhile made GPU jobs unschedulable).
        self.inventory_pending = True
        self.beating = threading.Lock()  # one beat sent at a time (heartbeat.beat)
        # Replicas whose code or inputs are being fetched; set: stopped meanwhile.
        self.preparing: dict[ReplicaKey, threading.Event] = {}
        self.answering: dict[ReplicaKey, int] = {}  # start messages being handled, per key
        self.preparer = Preparer(settings, client, self.node_key)
        self.interpreters: dict[ReplicaKey, str] = {}  # a job environment's python (envs.py)
        self.sidecars = Sidecars(settings, client)  # checkpoints, metrics from files
        # Ended replicas' senders, for a wipe of Redis just after an end (workers/node/replay.py).
        self.ended = AfterEnd()
        # Warm replica processes (workers/node/pool_size.py says how many; none until
        # start_pool).
        fixed = None if settings.REPLICA_POOL_SIZE == "auto" else settings.REPLICA_POOL_SIZE
        size = PoolSize(fixed, self.free_slots, settings.REPLICA_POOL_MEMORY)
        user = self.replica_user(0)
        private = user is not None and user.private_tmp
        preload = settings.REPLICA_POOL_PRELOAD
        self.pool = ReplicaPool(size, self.python, self.node_id, self.data_dir, private, preload)

    @property
    def python(self) -> str:
        """The interpreter that runs replicas."""
        return self.settings.REPLICA_PYTHON or sys.executable

    def replica_user(self, job_id: int) -> isolation.ReplicaUser | None:
        """Who job `job_id`'s replicas run as here (None: as this agent's user)."""
        return isolation.replica_user(self.settings, job_id)

    def free_slots(self) -> int:
        """Slots no replica holds, none being fetched for (the warm pool's size)."""
        with self.lock:
            return self.settings.NODE_SLOTS - len(self.processes) - len(self.preparing)

    def start_pool(self) -> None:
        """Start keeping the warm replica processes (none when the pool size is 0)."""
        if not self.stopping.is_set():
            self.pool.start()

    def find_gpus(self) -> None:
        """Offer the GPUs found that the replicas' TensorFlow sees (heartbeat.find_gpus)."""
        heartbeat.find_gpus(self)

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
            fenced = claims.fenced(self, key)
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
        process, failure, python = None, None, None
        # Live while its environment builds: the job's logs show pip at work.
        shipper = self._shipper(key) if message.spec.requirements else None
        try:
            python = self.preparer.prepare(message.spec)
        except (BundleUnavailable, RequirementsFailed) as exc:
            failure = BUNDLE_REFUSED_EXIT, str(exc)  # permanent: the same fails again
        except Exception as exc:  # noqa: BLE001 - the store or the disk failed: retryable
            failure = fetch_exit_code(exc), f"could not fetch the job's code or inputs: {exc}"
        with self.lock:
            cancelled = self.preparing.pop(key).is_set() or self.stopping.is_set()
            if failure is None and not cancelled:
                process, failure = self._spawn(message, python)
        if process is None:
            self.preparer.release(python)
        if cancelled and failure is None:
            # Stopped while its code was fetched: nothing was started.
            self.exits.never_started(key, until_sent=True)
        self._started_or_refused(key, process, failure, shipper)

    def _spawn(
        self, message: StartReplica, python: str | None = None
    ) -> tuple[ReplicaProcess | None, tuple[int, str] | None]:
        """Spawn the replica (lock held) with `python` (None: the node's interpreter)."""
        key = ReplicaKey.of(message.spec)
        self.sidecars.follow(key)  # before the process writes
        if python is not None:
            self.interpreters[key] = python
        try:
            process = spawn(
                message,
                self.data_dir,
                self.python_of(key),
                self.replica_user(key.job_id),
                self.pool,
                self.settings,
            )
        except CommandNotFound as exc:
            return None, (SPAWN_NOT_FOUND_EXIT, str(exc))
        except Exception as exc:  # noqa: BLE001 - any failure is this replica's exit
            return None, (spawn_exit_code(exc), f"could not start the process: {exc}")
        self.processes[process.key] = process
        self.respawns.started(process.key, message)
        return process, None

    def python_of(self, key: ReplicaKey) -> str:
        """The interpreter replica `key` runs with: its job environment's, or the node's."""
        return self.interpreters.get(key, self.python)

    def _shipper(self, key: ReplicaKey) -> LogShipper:
        shipper = LogShipper(
            self.redis, key, layout.log_file(self.data_dir, key.job_id, key.attempt, key.index)
        )
        shipper.start()
        return shipper

    def _started_or_refused(
        self,
        key: ReplicaKey,
        process: ReplicaProcess | None,
        failure: tuple[int, str] | None,
        shipper: LogShipper | None = None,
    ) -> None:
        """Report a start (and supervise the process) or a refusal."""
        if process is None and shipper is not None:
            shipper.finish()  # pip's lines reach the job's logs before its exit does
        if failure is not None:
            self.exits.refused(key, *failure)
        if process is None:
            self.interpreters.pop(key, None)
            self.sidecars.discard(key)
            return
        warm = " (a warm process)" if process.warm else ""
        log.info("started %s as pid %d%s", key, process.popen.pid, warm)
        shipper = shipper or self._shipper(key)
        self.sidecars.start(key)
        publish_node_event(
            self.redis,
            ReplicaStarted(
                self.node_id, key.job_id, key.attempt, key.index, process.popen.pid, time.time()
            ),
            self.node_key,
        )
        threading.Thread(
            target=supervision.watch,
            args=(self, process, shipper),
            daemon=True,
            name=f"watch-{key.job_id}-{key.attempt}-{key.index}",
        ).start()

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

    # -- the node's heartbeat and lease (workers/node/heartbeat.py) ----------
    def heartbeat(self) -> None:
        """Publish what runs here once; the lease runs again once Redis has it."""
        heartbeat.beat(self)

    def start_heartbeats(self) -> None:
        """Beat on one thread, watch the lease on another."""
        heartbeat.start(self)

    def heartbeat_loop(self) -> None:
        """Beat until the agent stops."""
        heartbeat.beat_loop(self)

    def fence(self) -> None:
        """The lease lapsed: stop every replica here."""
        heartbeat.fence(self)

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
