"""The node's heartbeat and lease: what runs here published to Redis every few seconds,
and every replica stopped when Redis has taken no beat for the lease's length
(workers/node/lease.py), before the control plane can place its gang elsewhere.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import TYPE_CHECKING

import redis

from services.wire.events import NodeHeartbeat
from services.wire.keys import NODES_HASH
from services.wire.signing import HEARTBEAT, seal
from workers.node import claims, gpus, ports
from workers.node.lease import CHECK_EVERY, fence_grace

if TYPE_CHECKING:
    from workers.node.agent import Agent

log = logging.getLogger("cohort.agent")


def beat(agent: Agent) -> None:
    """Publish this node's address, capacity and running replicas; once Redis has
    taken it, the lease runs again from the moment it was sent. One at a time, each
    made when its turn comes: the last one Redis takes is the newest."""
    with agent.beating:
        _beat(agent)


def beat_once(agent: Agent) -> None:
    """A beat now, off the beat loop (news the control plane should not wait for)."""
    try:
        beat(agent)
    except redis.RedisError as exc:
        log.warning("heartbeat failed: %s", exc)


def _beat(agent: Agent) -> None:
    now = time.time()
    with agent.lock:
        running = tuple((k.job_id, k.attempt, k.index) for k in agent.processes)
        preparing = tuple(
            (k.job_id, k.attempt, k.index) for k in {*agent.preparing, *agent.answering}
        )
        exited = agent.exits.recent_codes(now)
        gpu_ids, gpu_models = tuple(agent.gpu_ids), agent.gpu_models
        pending = agent.inventory_pending
    beat = NodeHeartbeat(
        node_id=agent.node_id,
        address=agent.settings.NODE_ADDRESS,
        slots=agent.settings.NODE_SLOTS,
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
                    agent.settings.PORT_RANGE_START, agent.settings.PORT_RANGE_END
                )
            )
        ),
        port_space=ports.port_space(),
        inventory_pending=pending,
        container_engine=agent.settings.CONTAINER_ENGINE,
    )
    sealed = seal(
        agent.node_key, purpose=HEARTBEAT, node_id=agent.node_id, body=beat.encode(), now=now
    )
    sent = agent.lease.now()  # no later than Redis (and the control plane) gets it
    agent.redis.hset(NODES_HASH, agent.node_id, sealed)
    agent.lease.renew(sent)


def start(agent: Agent) -> None:
    """Beat on one thread, watch the lease on another (a beat on a cut link blocks
    far longer than the lease: workers/node/lease.py)."""
    threading.Thread(target=beat_loop, args=(agent,), daemon=True, name="heartbeat").start()
    threading.Thread(target=lease_loop, args=(agent,), daemon=True, name="lease").start()


def beat_loop(agent: Agent) -> None:
    """Beat every HEARTBEAT_INTERVAL until the agent stops; after a wipe of Redis, write
    again what it lost of this node's."""
    while not agent.stopping.is_set():
        try:
            beat(agent)
            with agent.lock:
                claims.check_generation(agent)
            agent.ended.tick()
        except redis.RedisError as exc:
            log.warning("heartbeat failed: %s", exc)
        except Exception:  # noqa: BLE001 - the broker refused the queue's declaration
            log.exception("could not restore what Redis lost; trying again")
        agent.stopping.wait(agent.settings.HEARTBEAT_INTERVAL)


def lease_loop(agent: Agent) -> None:
    """Stop every replica whenever the lease has lapsed; sleep until it may."""
    while not agent.stopping.is_set():
        left = agent.lease.left()
        if left <= 0:
            fence(agent)
        # A renewal only moves the end later: sleeping until the end seen is safe.
        agent.stopping.wait(left if left > 0 else CHECK_EVERY)


def fence(agent: Agent) -> None:
    """The lease lapsed: stop every replica before the control plane declares this
    node lost and places the gang elsewhere (never two copies)."""
    # Read without the agent's lock: its holder may be blocked in a call to the very
    # Redis that is out of reach (a start's claim, the generation check), for longer
    # than the lease. Copying a dict is one step under the GIL; a process a start adds
    # after it is caught by the next check (the lease stays lapsed).
    processes = [p for p in agent.processes.copy().values() if not p.stop_requested.is_set()]
    for cancelled in agent.preparing.copy().values():
        cancelled.set()  # still fetching its code: it will not start
    if not processes:
        return
    grace = fence_grace(agent.settings)
    log.error(
        "no heartbeat taken by Redis for %.0fs: stopping %d replicas (SIGKILL after %.1fs)",
        agent.settings.AGENT_LEASE,
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


def find_gpus(agent: Agent) -> None:
    """Offer the GPUs found (NVML, COHORT_NODE_GPUS) that the replicas' TensorFlow
    sees; asking it takes seconds, so the node's beats say its inventory is pending
    until then, and the first beat after it goes at once."""
    try:
        found = {gpu.index: gpu for gpu in gpus.discover()}
        ids = gpus.usable_gpus(
            gpus.node_gpu_ids(agent.settings.NODE_GPUS, list(found)),
            agent.settings.REPLICA_PYTHON or sys.executable,
            agent.settings.NODE_GPU_PROBE,
        )
        models = tuple((found[i].name, found[i].memory_mb) if i in found else ("", 0) for i in ids)
    except Exception:  # noqa: BLE001 - a node that cannot list GPUs offers none
        log.exception("could not list this node's GPUs: offering none")
        ids, models = [], ()
    with agent.lock:
        agent.gpu_ids, agent.gpu_models = ids, models
        agent.inventory_pending = False
    if ids:
        log.info(
            "offering GPUs %s: %s",
            ids,
            ", ".join(name or "unnamed" for name, _memory in models),
        )
    beat_once(agent)
