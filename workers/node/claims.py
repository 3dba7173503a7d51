"""Which node runs a replica: its claim in Redis, and the claims written again after a wipe.

Start messages are delivered at least once, and a copy may reach any node: the first
delivery that claims the replica (SET NX) starts it; every other is fenced off here.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NamedTuple

from services.wire.client import publish_node_event
from services.wire.events import ReplicaStarted
from services.wire.keys import claim_key, node_queue
from workers.node.attempts import current_attempt
from workers.node.launcher import ReplicaKey

if TYPE_CHECKING:
    from workers.node.agent import Agent

log = logging.getLogger("cohort.agent")

CLAIM_TTL = 30 * 86400  # seconds: far past any message's redelivery


class Fenced(NamedTuple):
    """Why a start message does not start its replica here."""

    why: str
    level: int  # of the log line that says so
    # Claimed by this node's previous agent, never reported: the replica is reported as
    # exited (INTERRUPTED_START_EXIT), not ignored, so that its gang does not wait for it.
    interrupted: bool = False


def fenced(agent: Agent, key: ReplicaKey) -> Fenced | None:
    """Fencing for at-least-once delivery (lock held): no stale attempt, never two
    processes. None: claimed here now, start it; else why not."""
    check_generation(agent)  # the claims of what runs here first, after a wipe
    current = current_attempt(agent.redis, key.job_id)
    if current is not None and current != key.attempt:
        return Fenced(f"attempt {current} is current", logging.INFO)
    # Compare-and-set on the replica's claim: whichever delivery gets here
    # first (on any node) starts it; every other copy of the message is ignored.
    if claim(agent.redis, agent.node_id, key):
        return None
    held = agent.redis.get(claim_key(key.job_id, key.attempt, key.index))
    holder = held.decode() if isinstance(held, bytes) else held
    if holder == agent.node_id:
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


def claim(client: Any, node_id: str, key: ReplicaKey) -> Any:
    """Claim replica `key` for node `node_id` unless a node holds it (SET NX): true
    when claimed here; on a pipeline, queued (its result comes with `execute`)."""
    return client.set(claim_key(key.job_id, key.attempt, key.index), node_id, nx=True, ex=CLAIM_TTL)


def check_generation(agent: Agent) -> None:
    """If Redis lost its data (restarted, flushed, replaced), write again what it
    lost of this node's (lock held): its queue's binding, the claim of every replica
    started or stopped here, so no start message (a re-sent one, a redelivered one)
    starts a second copy on any node, and a `replica_started` event for each process
    running, whose first event may have been lost before the scheduler read it."""
    if agent.generation.check(agent.redis):
        agent.restore_due = True
    if not agent.restore_due:
        return
    keys = sorted(agent.started, key=lambda k: (k.job_id, k.attempt, k.index))
    log.warning(
        "Redis lost its data: declaring queue %s and claiming the %d replicas started here again",
        node_queue(agent.node_id),
        len(keys),
    )
    agent.declare_queue()
    pipe = agent.redis.pipeline(transaction=False)
    for key in keys:
        claim(pipe, agent.node_id, key)
    for key, claimed in zip(keys, pipe.execute(), strict=True):
        if not claimed:  # another node's since the wipe: say so, it cannot be undone
            log.error("replica %s was claimed by another node after Redis lost its data", key)
    for process in agent.processes.values():
        publish_node_event(
            agent.redis,
            ReplicaStarted(
                agent.node_id,
                process.key.job_id,
                process.key.attempt,
                process.key.index,
                process.popen.pid,
                process.started_at,
            ),
            agent.node_key,
        )
    agent.restore_due = False  # not before: a failure above is tried again
