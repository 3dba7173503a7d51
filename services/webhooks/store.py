"""Webhooks created, read and deleted in the caller's project; their deliveries listed; a
test event (`ping`). Service functions flush, the caller commits."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Session

from services.exceptions import InvalidWebhook, WebhookNotFound
from services.models import Project, Webhook, WebhookAttempt, WebhookDelivery
from services.settings import Settings
from services.webhooks import outbox, signing, targets
from services.webhooks.schemas import (
    AttemptRead,
    DeliveryList,
    DeliveryRead,
    WebhookCreate,
    WebhookCreated,
    WebhookRead,
)


def check_target(url: str, settings: Settings) -> None:
    """Refuse a URL the sender would refuse (targets.py), naming the field.

    Raises:
        InvalidWebhook: why, and what the cluster's setting could allow.
    """
    try:
        targets.check_url(url, targets.allowed_networks(settings.WEBHOOK_ALLOWED_NETWORKS))
    except targets.Blocked as exc:
        raise InvalidWebhook("url", str(exc)) from None


def create_webhook(
    *, session: Session, project_id: int, webhook_in: WebhookCreate, settings: Settings
) -> WebhookCreated:
    """A new webhook of the project; its answer holds the signing secret, once."""
    check_target(webhook_in.url, settings)
    webhook = Webhook(
        project_id=project_id,
        url=webhook_in.url.strip(),
        events=list(webhook_in.events),
        note=webhook_in.note,
        secret=signing.new_secret(),
    )
    session.add(webhook)
    session.flush()
    read = to_read(session=session, webhook=webhook)
    return WebhookCreated(**read.model_dump(), secret=webhook.secret)


def read_webhook(*, session: Session, project_id: int, webhook_id: int) -> Webhook:
    """The project's webhook (another project's is not found)."""
    webhook = session.get(Webhook, webhook_id)
    if webhook is None or webhook.project_id != project_id:
        raise WebhookNotFound(webhook_id)
    return webhook


def list_webhooks(*, session: Session, project_id: int) -> list[Webhook]:
    return list(
        session.execute(
            sa.select(Webhook).where(Webhook.project_id == project_id).order_by(Webhook.id)
        ).scalars()
    )


def to_read(*, session: Session, webhook: Webhook) -> WebhookRead:
    counts = dict(
        session.execute(
            sa.select(WebhookDelivery.state, sa.func.count())
            .where(
                WebhookDelivery.webhook_id == webhook.id,
                WebhookDelivery.state.in_(("pending", "failed")),
            )
            .group_by(WebhookDelivery.state)
        ).all()
    )
    project = session.get(Project, webhook.project_id)
    return WebhookRead(
        id=webhook.id,
        project=project.name if project else "",
        url=webhook.url,
        events=list(webhook.events),
        note=webhook.note,
        created_at=webhook.created_at,
        pending=counts.get("pending", 0),
        failed=counts.get("failed", 0),
    )


def delete_webhook(*, session: Session, webhook: Webhook) -> None:
    """Delete a webhook with its deliveries: nothing more is sent to it."""
    session.delete(webhook)
    session.flush()


def ping(*, session: Session, webhook: Webhook) -> DeliveryRead:
    """A test event (`ping`) for the webhook alone, sent like any delivery."""
    project = session.get(Project, webhook.project_id)
    delivery = outbox.deliver(
        session,
        webhook=webhook,
        project=project.name if project else "",
        event="ping",
        payload={"webhook": {"id": webhook.id, "url": webhook.url}},
    )
    session.flush()
    return _delivery_read(delivery, [])


def list_deliveries(*, session: Session, webhook: Webhook, limit: int) -> DeliveryList:
    """The webhook's newest deliveries, each with its attempts (oldest first)."""
    deliveries = list(
        session.execute(
            sa.select(WebhookDelivery)
            .where(WebhookDelivery.webhook_id == webhook.id)
            .order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id)
            .limit(limit)
        ).scalars()
    )
    attempts: dict[str, list[AttemptRead]] = {d.id: [] for d in deliveries}
    for attempt in session.execute(
        sa.select(WebhookAttempt)
        .where(WebhookAttempt.delivery_id.in_(list(attempts)))
        .order_by(WebhookAttempt.id)
    ).scalars():
        attempts[attempt.delivery_id].append(
            AttemptRead(
                started_at=attempt.started_at,
                duration_ms=attempt.duration_ms,
                status_code=attempt.status_code,
                answer=attempt.answer,
                error=attempt.error,
            )
        )
    return DeliveryList(items=[_delivery_read(d, attempts[d.id]) for d in deliveries])


def _delivery_read(delivery: WebhookDelivery, attempts: list[AttemptRead]) -> DeliveryRead:
    return DeliveryRead(
        id=delivery.id,
        event=delivery.event,
        state=delivery.state,
        created_at=delivery.created_at,
        next_attempt_at=delivery.next_attempt_at if delivery.state == "pending" else None,
        finished_at=delivery.finished_at,
        attempts=attempts,
    )
