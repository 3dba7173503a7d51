"""Send the scheduler's messages to node queues through Celery."""

from __future__ import annotations

import logging

import redis
from celery import Celery

from services.wire.bus import attempt_key, node_queue
from services.wire.messages import CleanupJob, Message, StartReplica, StopReplica

log = logging.getLogger(__name__)


class CeleryDispatcher:
    """services.wire.messages.Dispatcher over Celery: each message to its node's own queue."""

    def __init__(self, app: Celery, client: redis.Redis) -> None:
        self.app = app
        self.redis = client

    def send(self, messages: list[Message]) -> None:
        starts_ok = self._publish_attempts(messages)
        for message in messages:
            try:
                if isinstance(message, StartReplica):
                    if not starts_ok:
                        continue  # agents would refuse it as stale; re-sent from SQL later
                    self.app.send_task("workers.node.tasks.start_replica", args=[message.payload],
                                       queue=node_queue(message.node_id))
                elif isinstance(message, CleanupJob):
                    self.app.send_task("workers.node.tasks.cleanup_job", args=[message.job_id],
                                       queue=node_queue(message.node_id))
                elif isinstance(message, StopReplica):
                    self.app.send_task(
                        "workers.node.tasks.stop_replica",
                        args=[message.job_id, message.attempt, message.index,
                              message.grace_seconds],
                        queue=node_queue(message.node_id))
            except Exception:  # the scheduler re-sends from SQL on a later pass
                log.exception("could not send %s", message)

    def _publish_attempts(self, messages: list[Message]) -> bool:
        # Before any start goes out, so an agent that gets an older attempt's message
        # late can tell it is stale. One write per job, not per replica.
        attempts = {int(m.payload["job_id"]): int(m.payload["attempt"])
                    for m in messages if isinstance(m, StartReplica)}
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
