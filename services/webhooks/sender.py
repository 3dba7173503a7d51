"""The sender's round, run by the scheduler's leader in a thread of its own
(workers/control/webhooks.py): claim the deliveries that are due, POST each, record what
came back.

Each round is a few short transactions and no lock is held while sending:
* claim: due pending deliveries, `FOR UPDATE SKIP LOCKED` (two senders never claim one),
  each moved past the longest its send can take (`lease`) and committed, so a sender that
  dies mid-send leaves it to be sent again once that send could no longer be running;
* send: outside any transaction, a few at a time (a hanging receiver holds one thread);
* record: the attempt, and the delivery delivered (2xx), due again after a backoff with
  jitter, or failed once COHORT_WEBHOOK_RETRY_FOR has passed since its event.

The guarantee is at least once, with the same id and body on every attempt: a sender that
dies after the receiver answered and before the record commits sends it again.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

import sqlalchemy as sa

from services.db import Sessions
from services.models import Webhook, WebhookAttempt, WebhookDelivery, utcnow
from services.settings import Settings
from services.webhooks import posting, signing, targets

log = logging.getLogger("cohort.webhooks")


BATCH = 32  # deliveries claimed a round
PARALLEL = 8  # sent at once
LONGEST_WAIT = 3600.0  # between two attempts
PRUNE_EVERY = 60.0  # seconds between two deletions of finished deliveries
PRUNE_BATCH = 1000  # deleted at most at once (a short transaction)


@dataclass(frozen=True)
class Claimed:
    id: str
    url: str
    secret: str
    body: str


def retry_delay(attempts: int, first: float, rand: random.Random | None = None) -> float:
    """Seconds before the next attempt after `attempts` failed ones: `first`
    (COHORT_WEBHOOK_FIRST_RETRY) doubled per
    attempt, at most LONGEST_WAIT, then jittered down to half at random, so deliveries
    that failed together (a receiver down) do not all come back at once."""
    delay = min(LONGEST_WAIT, first * 2.0 ** max(0, attempts - 1))
    jitter: float = (rand or random).random()
    return delay * (0.5 + 0.5 * jitter)


class Sender:
    """Sends due deliveries in rounds; `sessions` gives the transactions (the leader's
    fenced ones)."""

    def __init__(self, settings: Settings, sessions: Sessions) -> None:
        self.settings = settings
        self.sessions = sessions
        self.allowed = targets.allowed_networks(settings.WEBHOOK_ALLOWED_NETWORKS)
        # Longer than a claimed delivery can wait for a thread and then be sent (each send
        # ends within 3 timeouts: connect, write, read), so no claim runs out mid-send.
        timeout = settings.WEBHOOK_TIMEOUT
        self.lease = dt.timedelta(seconds=(BATCH // PARALLEL + 1) * 3 * timeout + 30)
        self.client = posting.new_client(timeout)
        self.pool = ThreadPoolExecutor(PARALLEL, thread_name_prefix="webhook-send")
        self.inflight: set[Future[None]] = set()
        self.pruned_at = float("-inf")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()

    def run_round(self) -> bool:
        """Claim due deliveries, as many as fit beside those still being sent, and hand
        them to the sending threads; whether more may be due at once (the claim was full).
        A round never waits for a send: a receiver that hangs holds one thread until its
        timeout, not the others' deliveries."""
        if time.monotonic() - self.pruned_at >= PRUNE_EVERY:
            self.prune()
        self.inflight = {future for future in self.inflight if not future.done()}
        room = BATCH - len(self.inflight)
        if room <= 0:
            return True
        claimed = self.claim(room)
        self.inflight |= {self.pool.submit(self._send_and_record, c) for c in claimed}
        return len(claimed) == room

    def prune(self) -> int:
        """Delete finished deliveries (and their attempts) older than
        COHORT_WEBHOOK_KEEP_FOR, a batch at a time; returns how many."""
        self.pruned_at = time.monotonic()
        before = utcnow() - dt.timedelta(seconds=self.settings.WEBHOOK_KEEP_FOR)
        with self.sessions() as session:
            old = (
                sa.select(WebhookDelivery.id)
                .where(WebhookDelivery.state != "pending", WebhookDelivery.finished_at < before)
                .limit(PRUNE_BATCH)
                .scalar_subquery()
            )
            result = session.execute(sa.delete(WebhookDelivery).where(WebhookDelivery.id.in_(old)))
        return int(getattr(result, "rowcount", 0) or 0)

    def drain(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the sends under way (tests, shutdown)."""
        wait(self.inflight, timeout=timeout)

    def claim(self, limit: int = BATCH) -> list[Claimed]:
        """Due deliveries no other sender holds, now held by this one for `lease`."""
        now = utcnow()
        with self.sessions() as session:
            rows = session.execute(
                sa.select(WebhookDelivery, Webhook.url, Webhook.secret)
                .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
                .where(WebhookDelivery.state == "pending", WebhookDelivery.next_attempt_at <= now)
                .order_by(WebhookDelivery.next_attempt_at)
                .limit(limit)
                # Rows another sender is claiming are passed over, not waited for.
                .with_for_update(of=WebhookDelivery, skip_locked=True)
            ).all()
            for delivery, _, _ in rows:
                delivery.next_attempt_at = now + self.lease
        return [Claimed(d.id, url, secret, d.body) for d, url, secret in rows]

    def _send_and_record(self, claimed: Claimed) -> None:
        started = utcnow()
        outcome = self.send(claimed)
        try:
            self.record(claimed.id, started, outcome)
        except Exception:  # the claim's lease runs out and the delivery is sent again
            log.exception("could not record webhook delivery %s", claimed.id)

    def send(self, claimed: Claimed) -> posting.Outcome:
        """One attempt: the URL checked again (targets.py), then the POST to the address
        that was checked."""
        began = time.monotonic()
        try:
            target = targets.check_url(claimed.url, self.allowed)
        except targets.Blocked as exc:
            spent = round((time.monotonic() - began) * 1000)
            return posting.Outcome(None, "", f"refused: {exc}"[: posting.ERROR_CHARS], spent)
        body = claimed.body.encode()
        headers = signing.headers(
            secret=claimed.secret, delivery_id=claimed.id, timestamp=int(time.time()), body=body
        )
        return posting.post(self.client, target, headers, body)

    def record(self, delivery_id: str, started: dt.datetime, outcome: posting.Outcome) -> None:
        """The attempt, and where the delivery stands after it."""
        now = utcnow()
        with self.sessions() as session:
            delivery = session.get(WebhookDelivery, delivery_id, with_for_update=True)
            if delivery is None or delivery.state != "pending":  # its webhook was deleted
                return
            session.add(
                WebhookAttempt(
                    delivery_id=delivery_id,
                    started_at=started,
                    duration_ms=outcome.duration_ms,
                    status_code=outcome.status_code,
                    answer=outcome.answer,
                    error=outcome.error,
                )
            )
            delivery.attempts += 1
            deadline = delivery.created_at + dt.timedelta(seconds=self.settings.WEBHOOK_RETRY_FOR)
            if outcome.delivered:
                delivery.state, delivery.finished_at = "delivered", now
            elif now >= deadline:
                delivery.state, delivery.finished_at = "failed", now
            else:
                wait = retry_delay(delivery.attempts, self.settings.WEBHOOK_FIRST_RETRY)
                # One last attempt at the deadline, rather than none after the last wait.
                delivery.next_attempt_at = min(now + dt.timedelta(seconds=wait), deadline)
