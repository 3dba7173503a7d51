"""Tables of webhooks (services/webhooks/): a project's subscriptions, the deliveries the
outbox records in the transaction of the change they announce, and each attempt to send
one."""

from __future__ import annotations

import datetime as dt

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from services.models.base import Base, utcnow


class Webhook(Base):
    """A URL that receives a project's events of the kinds it names, signed with its
    secret (shown once, when it is created)."""

    __tablename__ = "webhooks"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        sa.ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    url: Mapped[str] = mapped_column(sa.String(2048))
    events: Mapped[list[str]] = mapped_column(sa.JSON)
    note: Mapped[str] = mapped_column(sa.String(256), default="")
    # Kept to sign every delivery; never read back by the API after creation.
    secret: Mapped[str] = mapped_column(sa.String(128))
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)


class WebhookDelivery(Base):
    """One event for one webhook: its body fixed when the event is recorded, so every
    retry sends the same bytes under the same id (receivers deduplicate by it)."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        # The sender claims the pending deliveries due first, every round.
        sa.Index(
            "ix_webhook_deliveries_due",
            "next_attempt_at",
            postgresql_where=sa.text("state = 'pending'"),
            sqlite_where=sa.text("state = 'pending'"),
        ),
        sa.Index("ix_webhook_deliveries_webhook", "webhook_id", "created_at"),
        # The sender deletes the finished ones past COHORT_WEBHOOK_KEEP_FOR.
        sa.Index(
            "ix_webhook_deliveries_finished",
            "finished_at",
            postgresql_where=sa.text("state != 'pending'"),
            sqlite_where=sa.text("state != 'pending'"),
        ),
    )

    id: Mapped[str] = mapped_column(sa.String(36), primary_key=True)  # a UUID, the body's id
    webhook_id: Mapped[int] = mapped_column(sa.ForeignKey("webhooks.id", ondelete="CASCADE"))
    event: Mapped[str] = mapped_column(sa.String(64))
    body: Mapped[str] = mapped_column(sa.Text)
    created_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    # pending -> delivered | failed (no 2xx within COHORT_WEBHOOK_RETRY_FOR of created_at)
    state: Mapped[str] = mapped_column(sa.String(16), default="pending")
    # When it may be sent next; a claim moves it past the send's timeout, so a sender that
    # died holding it lets another take it only once that send could no longer be running.
    next_attempt_at: Mapped[dt.datetime] = mapped_column(default=utcnow)
    attempts: Mapped[int] = mapped_column(default=0)
    finished_at: Mapped[dt.datetime | None]


class WebhookAttempt(Base):
    """One try at sending a delivery: when, how long, and what came back."""

    __tablename__ = "webhook_attempts"

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True
    )
    delivery_id: Mapped[str] = mapped_column(
        sa.ForeignKey("webhook_deliveries.id", ondelete="CASCADE"), index=True
    )
    started_at: Mapped[dt.datetime]
    duration_ms: Mapped[int]
    status_code: Mapped[int | None]  # None: no answer (refused, timed out, blocked)
    # The start of the answer's body, or the error (bounded: services/webhooks/sender.py).
    answer: Mapped[str] = mapped_column(sa.Text, default="")
    error: Mapped[str] = mapped_column(sa.Text, default="")
