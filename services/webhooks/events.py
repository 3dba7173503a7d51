"""The events a webhook may subscribe to: one list, the API's schema and the outbox's."""

from __future__ import annotations

from typing import Literal, get_args

EventName = Literal[
    "job.succeeded",
    "job.failed",
    "job.cancelled",
    "sweep.ended",
    "schedule.fired",
    "model.version_registered",
    "model.alias_moved",
    "ping",
]

# `ping` is sent by `POST /webhooks/{id}/ping` alone; no subscription is needed for it.
EVENTS: tuple[str, ...] = tuple(name for name in get_args(EventName) if name != "ping")
SubscribableEvent = Literal[
    "job.succeeded",
    "job.failed",
    "job.cancelled",
    "sweep.ended",
    "schedule.fired",
    "model.version_registered",
    "model.alias_moved",
]
