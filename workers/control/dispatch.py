"""Send the scheduler's messages to node queues through Celery."""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery import Celery
from kombu.utils.uuid import uuid

from services.wire.clock import RedisClock
from services.wire.keys import attempt_key, node_queue
from services.wire.replica import Message, StartReplica
from services.wire.signing import PURPOSES, Keyring, seal_message
from workers.control.envelopes import EnvelopeMaker, supports_envelopes

log = logging.getLogger(__name__)

BATCH = 500  # Redis commands per pipeline


class CeleryDispatcher:
    """services.wire.replica.Dispatcher over Celery: each message to its node's own queue,
    as the one argument of its task, sealed with that node's key (its agent refuses
    anything else: services/wire/signing.py)."""

    def __init__(self, app: Celery, client: redis.Redis, keyring: Keyring) -> None:
        self.app = app
        self.redis = client
        self.keyring = keyring
        self.clock = RedisClock(client)  # messages are stamped with Redis's time (clock.py)
        self.declared: set[str] = set()  # node queues this dispatcher has declared
        self.envelopes = supports_envelopes(app)  # else every message through Celery

    def send(self, messages: list[Message]) -> None:
        starts_ok = self._publish_attempts(messages)
        outgoing: list[tuple[str, str, str]] = []  # (task, sealed message, queue)
        now = self.clock.now()
        for message in messages:
            if isinstance(message, StartReplica) and not starts_ok:
                continue  # agents would refuse it as stale; re-sent from SQL later
            try:
                sealed = seal_message(self.keyring.node(message.node_id), message, now=now)
            except Exception:  # the scheduler re-sends from SQL on a later pass
                log.exception("could not seal %s", message)
                continue
            outgoing.append((PURPOSES[type(message)], sealed, node_queue(message.node_id)))
        if not outgoing:
            return
        # A queue this dispatcher has not declared yet gets all of this send's messages
        # through Celery (which declares it, as an agent's Redis user expects); the
        # others as envelopes written directly (envelopes.py): each queue keeps its order.
        fresh = [o for o in outgoing if not self.envelopes or o[2] not in self.declared]
        known = [o for o in outgoing if self.envelopes and o[2] in self.declared]
        try:
            # One producer and one Redis pipeline for the pass's messages (kombu's publish
            # batch): a round trip to Redis per message was most of a busy pass's time.
            with self.app.producer_or_acquire() as producer:
                if fresh:
                    with producer.batch(BATCH):
                        for task, sealed, queue in fresh:
                            self._publish(producer, task, sealed, queue)
                if known:
                    self._push(producer, known)
        except Exception:  # the scheduler re-sends starts and stops from SQL later
            self.declared.clear()  # a new connection may need them again
            log.exception("could not send %d messages", len(outgoing))

    def _push(self, producer: Any, outgoing: list[tuple[str, str, str]]) -> None:
        """Messages to declared queues, each LPUSHed as Celery's envelope, BATCH to a
        pipeline as kombu's publish batch does (no transaction, no retry)."""
        maker = EnvelopeMaker(self.app)
        with producer.channel.conn_or_acquire() as client:
            with client.pipeline(transaction=False) as pipe:
                for start in range(0, len(outgoing), BATCH):
                    for task, sealed, queue in outgoing[start : start + BATCH]:
                        pipe.lpush(queue, maker.envelope(task, sealed, queue))
                    pipe.execute()

    def _publish(self, producer: Any, task: str, sealed: str, queue: str) -> None:
        """One task message, as `Celery.send_task(task, args=[sealed], queue=queue)`
        makes and publishes it (tests/streams/test_dispatch.py compares the two), by the
        two calls send_task itself makes: without its routing, settings look-ups and
        result object per message (a pass sends thousands), and each node queue
        declared once (kombu binds a copy of the queue for every declare)."""
        amqp = self.app.amqp
        message = amqp.create_task_message(
            uuid(),
            task,
            [sealed],
            {},
            reply_to=self.app.thread_oid,
            create_sent_event=self.app.conf.task_send_sent_event,
            ignore_result=None,
            # What Celery shows of the argument (its default is a repr of the whole
            # sealed message).
            argsrepr=f"[<{task} for {queue}>]",
        )
        amqp.send_task_message(
            producer,
            task,
            message,
            queue=queue,
            **({} if queue not in self.declared else {"declare": []}),
        )
        self.declared.add(queue)

    def _publish_attempts(self, messages: list[Message]) -> bool:
        # Before any start goes out, so an agent that gets an older attempt's message
        # late can tell it is stale. One write per job, not per replica.
        return publish_attempts(
            self.redis,
            {m.spec.job_id: m.spec.attempt for m in messages if isinstance(m, StartReplica)},
        )


def publish_attempts(client: redis.Redis, attempts: dict[int, int]) -> bool:
    """Write each job's current attempt (job id -> attempt); False if Redis refused."""
    if not attempts:
        return True
    try:
        pipe = client.pipeline(transaction=False)
        for job_id, attempt in attempts.items():
            pipe.set(attempt_key(job_id), attempt, ex=30 * 86400)
        pipe.execute()
    except redis.RedisError:
        log.exception("could not publish current attempts")
        return False
    return True
