"""The scheduler's messages to node queues: one Redis pipeline per pass, each message on its
node's queue as the Celery task an agent runs, sealed with that node's key."""

from __future__ import annotations

import base64
import json
import uuid

import redis

from services.settings import get_settings
from services.wire.keys import node_queue
from services.wire.replica import CleanupJob, Message, StopReplica
from services.wire.signing import PURPOSES, Keyring, unseal
from workers.celery_app import make_celery
from workers.control.dispatch import BATCH, CeleryDispatcher

KEYRING = Keyring("dispatch-test-signing-key-" + "k" * 32)


def queued(bus: redis.Redis, node_id: str) -> list[tuple[str, str]]:
    """(task name, sealed argument) of every task on a node's queue, oldest first."""
    tasks = []
    for raw in reversed(bus.lrange(node_queue(node_id), 0, -1)):  # LPUSH: newest first
        envelope = json.loads(raw)
        args, _kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
        tasks.append((envelope["headers"]["task"], args[0]))
    return tasks


def test_each_message_reaches_its_node_sealed_for_it(bus: redis.Redis) -> None:
    app = make_celery(get_settings().redis_url)
    messages: list[Message] = [
        StopReplica("n1", 7, 1, 0, 5.0),
        StopReplica("n2", 7, 1, 1, 5.0),
        CleanupJob("n1", 8),
    ]
    CeleryDispatcher(app, bus, KEYRING).send(messages)
    for node_id in ("n1", "n2"):
        mine = [m for m in messages if m.node_id == node_id]
        tasks = queued(bus, node_id)
        assert [task for task, _ in tasks] == [PURPOSES[type(m)] for m in mine]
        for (task, sealed), message in zip(tasks, mine, strict=True):
            opened = unseal(sealed, KEYRING.node(node_id), purpose=task, node_id=node_id)
            assert opened.body == message.encode()


def test_more_messages_than_one_pipeline_holds_all_arrive(bus: redis.Redis) -> None:
    app = make_celery(get_settings().redis_url)
    count = BATCH * 2 + 7
    CeleryDispatcher(app, bus, KEYRING).send(
        [StopReplica("n1", job, 1, 0, 5.0) for job in range(1, count + 1)]
    )
    tasks = queued(bus, "n1")
    assert len(tasks) == count
    last = unseal(tasks[-1][1], KEYRING.node("n1"), purpose=tasks[-1][0], node_id="n1")
    assert last.body == StopReplica("n1", count, 1, 0, 5.0).encode()


def _comparable(raw: bytes | str) -> dict[str, object]:
    """A queued task's envelope less what differs between any two messages (ids, the
    delivery tag, the process named as their origin)."""
    envelope = json.loads(raw)
    for name in ("id", "root_id", "origin"):
        envelope["headers"].pop(name)
    for name in ("correlation_id", "delivery_tag"):
        envelope["properties"].pop(name)
    return dict(envelope)


def _masked(raw: bytes | str) -> bytes:
    """A queued task's envelope as Redis holds it, its ids, delivery tag and shown argument
    replaced by placeholders (what differs between any two messages): the bytes an agent's
    Celery worker reads, else."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    envelope = json.loads(text)
    for value, placeholder in (
        (envelope["headers"]["id"], "ID"),
        (envelope["properties"]["delivery_tag"], "TAG"),
        (json.dumps(envelope["headers"]["argsrepr"]), '"ARGS"'),
    ):
        text = text.replace(value, placeholder)
    return text.encode()


def test_a_message_is_the_task_celery_send_task_makes(bus: redis.Redis) -> None:
    """The dispatcher sends a queue's first message by the calls Celery's send_task
    makes, and the later ones as the envelope it would have written (envelopes.py): what
    reaches the queue is what send_task would have put there, byte for byte, but for the
    ids and the argument's shown form (Celery's default is the whole sealed message)."""
    app = make_celery(get_settings().redis_url)
    message = StopReplica("n1", 7, 1, 0, 5.0)
    dispatcher = CeleryDispatcher(app, bus, KEYRING)
    assert dispatcher.envelopes  # the agents' app: the direct path is the one tested
    for _ in range(3):  # the queue's first message declares it; the next ones do not
        dispatcher.send([message])
        [ours] = bus.lrange(node_queue("n1"), 0, 0)
        _, sealed = queued(bus, "n1")[-1]
        bus.delete(node_queue("n1"))
        app.send_task(PURPOSES[StopReplica], args=[sealed], queue=node_queue("n1"))
        [celerys] = bus.lrange(node_queue("n1"), 0, 0)
        bus.delete(node_queue("n1"))
        mine, theirs = _comparable(ours), _comparable(celerys)
        shown = mine["headers"].pop("argsrepr")  # type: ignore[attr-defined]
        assert "sealed" not in str(shown) and sealed not in str(shown)
        theirs["headers"].pop("argsrepr")  # type: ignore[attr-defined]
        assert mine == theirs
        assert _masked(ours) == _masked(celerys)


def test_a_queue_first_seen_is_declared_through_celery_and_keeps_its_order(
    bus: redis.Redis,
) -> None:
    """A send with a queue the dispatcher knows and one it does not: the new queue's
    messages go through Celery, which declares it (its binding, which an agent's Redis
    user reads), the known queue's are written directly; each queue gets its messages in
    the order they were given."""
    app = make_celery(get_settings().redis_url)
    dispatcher = CeleryDispatcher(app, bus, KEYRING)
    dispatcher.send([StopReplica("n1", 1, 1, 0, 5.0)])
    bus.delete(node_queue("n1"))
    # A queue no other test has used: kombu binds a queue once per process.
    new = f"n-{uuid.uuid4().hex[:8]}"
    assert not bus.exists(f"_kombu.binding.{node_queue(new)}")
    messages: list[Message] = [
        StopReplica(node_id, job, 1, 0, 5.0) for job in range(2, 8) for node_id in ("n1", new)
    ]
    dispatcher.send(messages)
    assert bus.exists(f"_kombu.binding.{node_queue(new)}")
    assert dispatcher.declared == {node_queue("n1"), node_queue(new)}
    for node_id in ("n1", new):
        bodies = [
            unseal(sealed, KEYRING.node(node_id), purpose=task, node_id=node_id).body
            for task, sealed in queued(bus, node_id)
        ]
        assert bodies == [m.encode() for m in messages if m.node_id == node_id]


def test_an_app_configured_otherwise_sends_every_message_through_celery(
    bus: redis.Redis,
) -> None:
    """The envelopes are written for the agents' configuration only: an app that, say,
    sends task-sent events publishes every message through Celery, which sends them."""
    app = make_celery(get_settings().redis_url)
    app.conf.task_send_sent_event = True
    dispatcher = CeleryDispatcher(app, bus, KEYRING)
    assert not dispatcher.envelopes
    for job in (1, 2):  # the second to a queue already declared
        dispatcher.send([StopReplica("n1", job, 1, 0, 5.0)])
    assert [task for task, _ in queued(bus, "n1")] == [PURPOSES[StopReplica]] * 2
