"""The transactional outbox: an event becomes one delivery per webhook of its project that
subscribed to it, inserted in the caller's transaction, so an event is recorded if and only
if the change it announces commits. The sender (sender.py) sends them afterwards.

A project without webhooks costs one indexed read per event; a project's events only ever
reach its own webhooks (the read is by project)."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.models import Project, Webhook, WebhookDelivery, utcnow


def envelope(
    *, delivery_id: str, event: str, created_at: dt.datetime, project: str, data: dict[str, Any]
) -> str:
    """A delivery's body, fixed once: every retry sends these bytes."""
    return json.dumps(
        {
            "id": delivery_id,
            "event": event,
            "created_at": created_at.astimezone(dt.UTC).isoformat(),
            "project": project,
            "data": data,
        },
        separators=(",", ":"),
        sort_keys=True,
        default=str,
    )


def deliver(
    session: Session, *, webhook: Webhook, project: str, event: str, payload: dict[str, Any]
) -> WebhookDelivery:
    """One delivery of `event` to `webhook`, added to the session (not flushed)."""
    now = utcnow()
    delivery_id = str(uuid.uuid4())
    delivery = WebhookDelivery(
        id=delivery_id,
        webhook_id=webhook.id,
        event=event,
        body=envelope(
            delivery_id=delivery_id, event=event, created_at=now, project=project, data=payload
        ),
        created_at=now,
        state="pending",
        next_attempt_at=now,
        attempts=0,
    )
    session.add(delivery)
    return delivery


def emit(session: Session, *, project_id: int, event: str, payload: dict[str, Any]) -> int:
    """Record `event` of project `project_id` for each of its webhooks subscribed to it, in
    the caller's transaction; returns how many deliveries were made."""
    rows = session.execute(
        sa.select(Webhook, Project.name)
        .join(Project, Project.id == Webhook.project_id)
        .where(Webhook.project_id == project_id)
        .order_by(Webhook.id)
    ).all()
    made = 0
    for webhook, project in rows:
        if event in webhook.events:
            deliver(session, webhook=webhook, project=project, event=event, payload=payload)
            made += 1
    if made:
        session.flush()
    return made
