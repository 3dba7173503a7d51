"""A project's webhooks from Python (`Client` has these methods; admin tokens only):

hook = client.create_webhook("https://ci.example.com/cohort", ["job.failed"])
hook.secret          # shown once: what each delivery's signature is made with
client.webhook_deliveries(hook.id)
"""

from __future__ import annotations

from typing import TypeVar

from cohort import api_models as m
from cohort import calls

T = TypeVar("T")


class WebhookMethods:
    """The webhooks' calls, for a client that can `send` a Call (Client's)."""

    def send(self, call: calls.Call[T]) -> T:
        raise NotImplementedError

    def create_webhook(self, url: str, events: list[str], note: str = "") -> m.WebhookCreated:
        """Subscribe `url` to `events`; the answer's `secret` is shown this once."""
        return self.send(calls.create_webhook(url, events, note))

    def webhooks(self) -> list[m.WebhookRead]:
        return self.send(calls.webhooks())

    def delete_webhook(self, webhook_id: int) -> None:
        self.send(calls.delete_webhook(webhook_id))

    def ping_webhook(self, webhook_id: int) -> m.DeliveryRead:
        """Send a test event now; its delivery, as deliveries list it."""
        return self.send(calls.ping_webhook(webhook_id))

    def webhook_deliveries(self, webhook_id: int, limit: int = 50) -> list[m.DeliveryRead]:
        """The webhook's deliveries, newest first, with their attempts."""
        return self.send(calls.webhook_deliveries(webhook_id, limit))
