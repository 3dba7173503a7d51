"""Messages to node agents lost on their way: taken out of a node's Celery queue in Redis
before its agent could take them, as a crash between the scheduler's commit and its send,
or a Redis that lost its data, would lose them. And copies of start messages sent again,
with what the agents did about them (their logs, the `replica_started` events)."""

from __future__ import annotations

import json
import os
import signal
from base64 import b64decode
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import psutil
import redis

from cli.stack import Stack
from services.wire.acl import BINDING_PREFIXES
from services.wire.keys import EVENTS_STREAM
from services.wire.replica import START_TASK, STOP_TASK, StartReplica, StopReplica
from services.wire.signing import Sealed, node_key, seal_message
from tests.e2e.conftest import wait_for
from workers.celery_app import make_celery


def _blocked_pops(bus: redis.Redis, pids: list[int]) -> list[str]:
    """The BRPOPs of processes `pids` that Redis holds open: one would take a message
    pushed meanwhile, into a stopped process's socket."""
    ports = {c.laddr.port for pid in pids for c in psutil.Process(pid).net_connections("tcp")}
    return [
        c["addr"]
        for c in bus.client_list()
        if c.get("cmd") in ("brpop", "blpop")
        and "b" in c.get("flags", "")
        and int(c["addr"].rsplit(":", 1)[1]) in ports
    ]


@contextmanager
def agents_not_consuming(stack: Stack, *names: str) -> Iterator[redis.Redis]:
    """Agents `names` stopped (SIGSTOP) once the BRPOP each had open has timed out (kombu
    waits 1 s at a time): a message sent to their queues meanwhile stays in Redis, where
    the caller can take it out. Resumed on leaving; keep it well under NODE_TIMEOUT and
    PROGRESS_TIMEOUT, which the pause eats into (no heartbeat, no progress read)."""
    bus = redis.Redis.from_url(stack.settings.redis_url, decode_responses=True)
    pids = [stack.child(name).pid for name in names]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        wait_for(lambda: not _blocked_pops(bus, pids), 10, "the stopped agents' BRPOPs to end")
        yield bus
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def _job_of(task: str, raw: str) -> int | None:
    """The job a queued Celery message of `task` is about (None: another task)."""
    message = json.loads(raw)
    if message.get("headers", {}).get("task") != task:
        return None
    args, _kwargs, _embed = json.loads(b64decode(message["body"]))
    body = Sealed.decode(args[0]).body
    return (
        StartReplica.decode(body).spec.job_id
        if task == START_TASK
        else StopReplica.decode(body).job_id
    )


def drop_messages(
    bus: redis.Redis,
    node_ids: Iterable[str],
    task: str,
    job_id: int,
    count: int,
    timeout: float = 30.0,
) -> None:
    """Wait until `count` messages of `task` (START_TASK, STOP_TASK) for job `job_id` are in
    the queues of nodes `node_ids` (their agents not consuming), then delete them."""
    assert task in (START_TASK, STOP_TASK), task
    nodes = list(node_ids)

    def queued() -> list[tuple[str, str]]:
        found = []
        for node_id in nodes:
            for key in bus.scan_iter(match=f"node.{node_id}*"):
                if bus.type(key) == "list":  # the queue and its priority lists
                    found += [
                        (key, raw) for raw in bus.lrange(key, 0, -1) if _job_of(task, raw) == job_id
                    ]
        return found

    messages = wait_for(
        lambda: len(q := queued()) >= count and q,
        timeout,
        f"{count} {task} messages of job {job_id} queued for {nodes}",
    )
    assert len(messages) == count, messages
    for key, raw in messages:
        assert bus.lrem(key, 1, raw) == 1, "taken meanwhile by the stopped agent?"


def started_events(stack: Stack, job_id: int) -> list[tuple[int, int]]:
    """(attempt, index) of each `replica_started` event of job `job_id` in Redis."""
    client = redis.Redis.from_url(stack.settings.redis_url, decode_responses=True)
    found = []
    for _id, fields in client.xrange(EVENTS_STREAM):
        data = json.loads(fields["data"])
        if fields["kind"] == "replica_started" and data["job_id"] == job_id:
            found.append((data["attempt"], data["index"]))
    return found


def agent_name(node_id: str) -> str:
    """The stack's name of node `node_id`'s agent process (node-a's is the stack's own)."""
    return "agent" if node_id == "node-a" else f"agent-{node_id}"


def log_of(stack: Stack, name: str) -> str:
    path = stack.log_dir / f"{name}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def send_start(stack: Stack, message: StartReplica) -> None:
    """`message` sent to its node's queue, sealed now as the scheduler seals them (the
    fencing, not the signature, is under test)."""
    # Until its agent's consumer has declared the queue (kombu's binding), a message sent
    # to it is dropped: a node reports ready with its first heartbeat, which may be sooner.
    bus = redis.Redis.from_url(stack.settings.redis_url)
    wait_for(
        lambda: bus.exists(f"{BINDING_PREFIXES[0]}node.{message.node_id}"),
        60,
        f"node {message.node_id}'s agent to declare its queue",
    )
    key = node_key(stack.env["COHORT_SIGNING_KEY"], message.node_id)
    make_celery(stack.settings.redis_url).send_task(
        START_TASK, args=[seal_message(key, message)], queue=f"node.{message.node_id}"
    )


def claimed(
    stack: Stack, node_id: str, job_id: int, since: int = 0, by_predecessor: bool = False
) -> bool:
    """Whether node `node_id`'s agent refused a start of replica 0 of attempt 1 of job
    `job_id` for its claim (in its log after offset `since`): another node's, or with
    `by_predecessor`, its own node's from before the agent restarted (answered as an
    exit of a replica never started, workers/node/exits.py)."""
    key = f"ReplicaKey(job_id={job_id}, attempt=1, index=0)"
    said = (
        f"not starting {key}: this node's previous agent claimed it"
        if by_predecessor
        else f"ignoring start of {key}: already claimed"
    )
    return said in log_of(stack, agent_name(node_id))[since:]
