"""The scheduler's messages to node queues: one Redis pipeline per pass, each message on its
node's queue as the Celery task an agent runs, sealed with that node's key."""

from __future__ import annotations

import base64
import json

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


def test_a_message_is_the_task_celery_send_task_makes(bus: redis.Redis) -> None:
    """The dispatcher builds messages by the calls Celery's send_task makes, without the
    rest of it: what reaches the queue is what send_task would have put there, but for
    the argument's shown form (Celery's default is the whole sealed message)."""
    app = make_celery(get_settings().redis_url)
    message = StopReplica("n1", 7, 1, 0, 5.0)
    dispatcher = CeleryDispatcher(app, bus, KEYRING)
    for _ in range(2):  # the queue's first message declares it; the next does not
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
