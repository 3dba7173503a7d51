"""The events a webhook may subscribe to: one list, the API's schema and the CLI's help."""

from __future__ import annotations

from typing import Literal, get_args

SubscribableEvent = Literal[
    "job.succeeded",
    "job.failed",
    "job.cancelled",
    "sweep.ended",
    "schedule.fired",
    "model.version_registered",
    "model.alias_moved",
]
EVENTS: tuple[str, ...] = get_args(SubscribableEvent)
# Besides these, `ping` (POST /webhooks/{id}/ping) goes to its one webhook, unsubscribed.
