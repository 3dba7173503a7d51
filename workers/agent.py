"""The node agent: heartbeats, starts and stops replica processes, reports their exits.

One agent per machine. It consumes only its own Celery queue (`node.<id>`), with a
thread pool so that tasks run in this process, next to the processes they start.
It talks to the control plane through Redis alone (no SQL credentials).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import redis

from services.bus import NODES_HASH, get_redis, node_queue, publish_event
from services.settings import Settings, get_settings
from workers.launcher import ReplicaKey, ReplicaProcess, spawn, stop_group, tail

log = logging.getLogger("cohort.agent")

_agent: Agent | None = None


def current_agent() -> Agent:
    """The agent of this process (set by run_agent before the worker consumes)."""
    if _agent is None:
        raise RuntimeError("no agent in this process: start it with `cohort agent`")
    return _agent


def exit_code_of(returncode: int) -> int:
    """Popen's -N for 'killed by signal N' as the shell's 128+N (137 = SIGKILL)."""
    return 128 - returncode if returncode < 0 else returncode


class Agent:
    """Supervises the replica processes of one node."""

    def __init__(self, settings: Settings, client: redis.Redis) -> None:
        self.settings = settings
        self.redis = client
        self.node_id = settings.node_id
        self.data_dir: Path = settings.data_dir
        self.processes: dict[ReplicaKey, ReplicaProcess] = {}
        self.started: set[ReplicaKey] = set()  # every key ever started here
        self.lock = threading.Lock()
        self.stopping = threading.Event()

    # -- tasks -------------------------------------------------------------
    def start_replica(self, payload: dict[str, Any]) -> None:
        """Start a replica once; a redelivered or repeated message is ignored."""
        key = ReplicaKey.from_payload(payload)
        with self.lock:
            if key in self.started or self.stopping.is_set():
                log.info("ignoring start of %s: already started here", key)
                return
            self.started.add(key)
            process = spawn(payload, self.data_dir, self.settings.redis_url)
            self.processes[key] = process
        log.info("started %s as pid %d", key, process.popen.pid)
        publish_event(self.redis, "replica_started", node_id=self.node_id,
                      job_id=key.job_id, attempt=key.attempt, index=key.index,
                      pid=process.popen.pid, ts=time.time())
        threading.Thread(target=self._watch, args=(process,), daemon=True,
                         name=f"watch-{key.job_id}-{key.attempt}-{key.index}").start()

    def stop_replica(self, job_id: int, attempt: int, index: int, grace: float) -> None:
        """Stop a replica if it runs here; stopping an unknown one is not an error."""
        key = ReplicaKey(job_id, attempt, index)
        with self.lock:
            self.started.add(key)  # a late start message must not start it after this
            process = self.processes.get(key)
        if process is None:
            # Nothing runs: say so, so the control plane can settle the replica.
            publish_event(self.redis, "replica_exited", node_id=self.node_id, job_id=job_id,
                          attempt=attempt, index=index, exit_code=143, log_tail="",
                          ts=time.time(), never_started=True)
            return
        stop_group(process, grace)

    # -- supervision -------------------------------------------------------
    def _watch(self, process: ReplicaProcess) -> None:
        returncode = process.popen.wait()
        code = exit_code_of(returncode)
        key = process.key
        with self.lock:
            self.processes.pop(key, None)
        log.info("%s exited with %d", key, code)
        publish_event(self.redis, "replica_exited", node_id=self.node_id, job_id=key.job_id,
                      attempt=key.attempt, index=key.index, exit_code=code,
                      log_tail=tail(process.log_path), ts=time.time())

    def heartbeat(self) -> None:
        """Publish this node's address, capacity and running replicas."""
        with self.lock:
            running = [[k.job_id, k.attempt, k.index] for k in self.processes]
        beat = {"node_id": self.node_id, "address": self.settings.NODE_ADDRESS,
                "slots": self.settings.NODE_SLOTS, "gpus": self.settings.NODE_GPUS,
                "ts": time.time(), "replicas": running}
        self.redis.hset(NODES_HASH, self.node_id, json.dumps(beat))

    def heartbeat_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                self.heartbeat()
            except redis.RedisError as exc:
                log.warning("heartbeat failed: %s", exc)
            self.stopping.wait(self.settings.HEARTBEAT_INTERVAL)

    def shutdown(self, grace: float = 5.0) -> None:
        """Stop every replica of this node (the agent is going away)."""
        self.stopping.set()
        with self.lock:
            processes = list(self.processes.values())
        threads = [threading.Thread(target=stop_group, args=(p, grace)) for p in processes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        try:
            self.redis.hdel(NODES_HASH, self.node_id)
        except redis.RedisError:
            pass


def run_agent(settings: Settings | None = None) -> None:
    """Run this machine's agent until it is told to stop (SIGTERM / Ctrl-C)."""
    global _agent
    settings = settings or get_settings()
    from workers.celery_app import app

    agent = Agent(settings, get_redis())
    _agent = agent
    agent.heartbeat()
    threading.Thread(target=agent.heartbeat_loop, daemon=True, name="heartbeat").start()
    log.info("agent %s at %s with %d slots, %d GPUs, queue %s", agent.node_id,
             settings.NODE_ADDRESS, settings.NODE_SLOTS, settings.NODE_GPUS,
             node_queue(agent.node_id))
    worker = app.Worker(
        hostname=f"agent@{agent.node_id}", queues=[node_queue(agent.node_id)],
        pool="threads", concurrency=4, loglevel="WARNING",
        without_heartbeat=True, without_mingle=True, without_gossip=True,
    )
    try:
        worker.start()
    finally:
        agent.shutdown()
