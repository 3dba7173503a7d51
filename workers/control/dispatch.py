"""Send the scheduler's messages to node queues through Celery."""

from __future__ import annotations

import logging

import redis
from celery import Celery

from services.wire.keys import attempt_key, node_queue
from services.wire.replica import Message, StartReplica
from services.wire.signing import PURPOSES, Keyring, seal_message

log = logging.getLogger(__name__)


class CeleryDispatcher:
    """services.wire.replica.Dispatcher over Celery: each message to its node's own queue,
    as the one argument of its task, sealed with that node's key (its agent refuses
    anything else: services/wire/signing.py)."""

    def __init__(self, app: Celery, client: redis.Redis, keyring: Keyring) -> None:
        self.app = app
        self.redis = client
        self.keyring = keyring

    def send(self, messages: list[Message]) -> None:
        starts_ok = self._publish_attempts(messages)
        for message in messages:
            if isinstance(message, StartReplica) and not starts_ok:
                continue  # agents would refuse it as stale; re-sent from SQL later
            try:
                sealed = seal_message(self.keyring.node(message.node_id), message)
                self.app.send_task(PURPOSES[type(message)], args=[sealed],
                                   queue=node_queue(message.node_id))
            except Exception:  # the scheduler re-sends from SQL on a later pass
                log.exception("could not send %s", message)

    def _publish_attempts(self, messages: list[Message]) -> bool:
        # Before any start goes out, so an agent that gets an older attempt's message
        # late can tell it is stale. One write per job, not per replica.
        attempts = {m.spec.job_id: m.spec.attempt for m in messages
                    if isinstance(m, StartReplica)}
        if not attempts:
            return True
        try:
            pipe = self.redis.pipeline(transaction=False)
            for job_id, attempt in attempts.items():
                pipe.set(attempt_key(job_id), attempt, ex=30 * 86400)
            pipe.execute()
        except redis.RedisError:
            log.exception("could not publish current attempts")
            return False
        return True
