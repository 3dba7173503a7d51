"""Pydantic I/O schemas of webhooks (`/api/v1/webhooks`)."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict, Field, field_validator

from services.webhooks.events import SubscribableEvent


class WebhookCreate(BaseModel):
    """`POST /webhooks`: where to send which of the project's events."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        min_length=1,
        max_length=2048,
        description="http(s)://host[:port]/path the events are POSTed to; a host whose "
        "address is loopback, private or link-local is refused unless the cluster allows "
        "its network (COHORT_WEBHOOK_ALLOWED_NETWORKS)",
        examples=["https://hooks.example.com/cohort"],
    )
    events: list[SubscribableEvent] = Field(
        min_length=1,
        max_length=16,
        description="the events it receives",
        examples=[["job.succeeded", "job.failed"]],
    )
    note: str = Field("", max_length=256, description="what it is for, for people")

    @field_validator("events")
    @classmethod
    def _once_each(cls, value: list[str]) -> list[str]:
        return sorted(set(value))


class WebhookRead(BaseModel):
    id: int
    project: str
    url: str
    events: list[str]
    note: str
    created_at: dt.datetime
    pending: int = Field(description="deliveries not yet delivered nor given up")
    failed: int = Field(description="deliveries given up after retrying")


class WebhookCreated(WebhookRead):
    secret: str = Field(
        description="the signing secret: shown in this answer only; keep it to verify "
        "Cohort-Webhook-Signature"
    )


class WebhookList(BaseModel):
    items: list[WebhookRead]


class AttemptRead(BaseModel):
    started_at: dt.datetime
    duration_ms: int
    status_code: int | None = Field(description="the answer's status; null: no answer")
    answer: str = Field(description="the start of the answer's body")
    error: str = Field(description="why the attempt failed, if it did")


class DeliveryRead(BaseModel):
    id: str = Field(description="the delivery's id, the body's `id` and Cohort-Webhook-Id")
    event: str
    state: str = Field(description="pending, delivered or failed")
    created_at: dt.datetime
    next_attempt_at: dt.datetime | None = Field(description="when it is tried next")
    finished_at: dt.datetime | None
    attempts: list[AttemptRead]


class DeliveryList(BaseModel):
    items: list[DeliveryRead]
