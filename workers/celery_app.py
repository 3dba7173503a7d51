"""The Celery application: broker from settings, short idempotent tasks on per-node queues."""

from __future__ import annotations

from celery import Celery

from services.settings import get_settings
from services.wire.client import celery_broker


def make_celery(broker_url: str | None = None) -> Celery:
    """Build the Celery app for the configured Redis."""
    app = Celery("workers", include=["workers.node.tasks"])
    # A `rediss://` URL's TLS parameters become broker_use_ssl (kombu reads none itself).
    url, tls = celery_broker(broker_url or get_settings().redis_url)
    app.conf.update(
        broker_url=url,
        broker_use_ssl=tls,
        task_ignore_result=True,
        result_backend=None,
        task_serializer="json",
        accept_content=["json"],
        # Acknowledge after the task ran: a start message is redelivered if the
        # agent dies mid-task, and the agent ignores a start it already acted on.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        # One queue key per node (no priority sub-queues): an agent's Redis user may
        # read exactly that key (services/wire/acl.py).
        broker_transport_options={"visibility_timeout": 3600, "priority_steps": [0]},
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        task_default_queue="cohort.default",
        task_create_missing_queues=True,
    )
    return app


app = make_celery()
