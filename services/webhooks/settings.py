"""The cluster's webhook settings, a part of `Settings` (services/settings.py)."""

from __future__ import annotations

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings

from services.webhooks.targets import allowed_networks


class WebhookSettings(BaseSettings):
    """Webhook delivery (services/webhooks/sender.py) and its address checks (targets.py)."""

    # Networks a webhook may reach although they are loopback, private, link-local or
    # otherwise not public (CIDRs, comma-separated: "10.20.0.0/16,127.0.0.1/32"). Empty:
    # public addresses only, so a project's admin cannot make the control plane call
    # into the cluster's own network (server-side request forgery).
    WEBHOOK_ALLOWED_NETWORKS: str = ""
    # One attempt's limit, connecting and waiting for the answer, in seconds.
    WEBHOOK_TIMEOUT: float = Field(10.0, gt=0, le=120)
    # A delivery is retried (with backoff) until this many seconds after its event, then
    # marked failed.
    WEBHOOK_RETRY_FOR: float = Field(24 * 3600.0, gt=0, le=30 * 24 * 3600)
    # Delivered and failed deliveries (with their attempts) are deleted this many seconds
    # after they finished; pending ones are kept until they finish.
    WEBHOOK_KEEP_FOR: float = Field(7 * 24 * 3600.0, gt=0)
    # Seconds before the first retry; each later wait doubles (up to an hour), with jitter.
    WEBHOOK_FIRST_RETRY: float = Field(10.0, gt=0, le=3600)
    # The sender's round: how often it looks for due deliveries, in seconds.
    WEBHOOK_DELIVERY_INTERVAL: float = Field(1.0, gt=0, le=3600)

    @field_validator("WEBHOOK_ALLOWED_NETWORKS")
    @classmethod
    def _networks(cls, value: str) -> str:
        # Refused when a process starts, not at a webhook's creation (a 500) or its send.
        try:
            allowed_networks(value)
        except ValueError as exc:
            raise ValueError(
                f"COHORT_WEBHOOK_ALLOWED_NETWORKS: {exc}; give CIDRs, comma-separated, "
                "e.g. 10.20.0.0/16,127.0.0.1/32"
            ) from None
        return value
