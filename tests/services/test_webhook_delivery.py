"""Webhook deliveries on PostgreSQL to a real HTTP receiver (tests/webhook_receiver.py):
an event recorded iff its change commits, for its own project's webhooks only; signed so
that the receiver's check in docs/webhooks.md passes; a receiver refusing connections,
then answering 500, then up gets it under the same id; a redirect is a failed attempt,
never followed; two senders never claim one delivery; a delivery gives up after
COHORT_WEBHOOK_RETRY_FOR; an address no longer allowed is refused at the attempt."""

from __future__ import annotations

import datetime as dt
import random
import re
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from services.db import session_scope
from services.jobs.transitions import transition_job
from services.models import Project, WebhookAttempt, WebhookDelivery
from services.settings import Settings
from services.statuses import JobStatus
from services.webhooks import store
from services.webhooks.schemas import WebhookCreate
from services.webhooks.sender import Sender, retry_delay
from tests.e2e.conftest import wait_for
from tests.factories import create_job, create_token
from tests.webhook_receiver import Receiver

DOCS = Path(__file__).parents[2] / "docs" / "webhooks.md"
FAST = {"WEBHOOK_ALLOWED_NETWORKS": "127.0.0.1/32", "WEBHOOK_FIRST_RETRY": 0.2}


def documented_verify() -> Callable[..., bool]:
    """The receiver's check as docs/webhooks.md prints it, run as written."""
    block = re.search(r"```python\n(.*?def verify\(.*?)```", DOCS.read_text(), re.S)
    assert block, "docs/webhooks.md lost its verification snippet"
    namespace: dict[str, Any] = {}
    exec(block.group(1), namespace)  # noqa: S102 - the documented snippet itself
    verify: Callable[..., bool] = namespace["verify"]
    return verify


def settings(**changes: Any) -> Settings:
    return Settings(**{**FAST, **changes})


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hook = Receiver().up()
    yield hook
    hook.stop_hanging()
    hook.down()


@pytest.fixture
def project(engine: Engine) -> Iterator[dict[str, Any]]:  # noqa: ARG001 - the test database
    """A project of its own; its rows are deleted afterwards."""
    name = f"hooks-{uuid.uuid4().hex[:8]}"
    with session_scope() as session:
        _, token = create_token(session, name)
    yield {"name": name, "id": token.project_id}
    with session_scope() as session:
        session.execute(sa.delete(Project).where(Project.id == token.project_id))


def subscribe(project: dict[str, Any], url: str, *events: str) -> tuple[int, str]:
    with session_scope() as session:
        created = store.create_webhook(
            session=session,
            project_id=project["id"],
            webhook_in=WebhookCreate(url=url, events=list(events or ["job.succeeded"])),
            settings=settings(),
        )
    return created.id, created.secret


def finish_job(project: dict[str, Any], status: JobStatus = JobStatus.SUCCEEDED) -> int:
    with session_scope() as session:
        job_id = create_job(session, project["id"], name="hooked", trainer="mlp_digits").id
    for step in (JobStatus.SCHEDULED, JobStatus.RUNNING, status):
        with session_scope() as session:
            transition_job(session=session, job_id=job_id, target=step, reason=f"to {step}")
    return job_id


def deliveries(webhook_id: int) -> list[WebhookDelivery]:
    with session_scope() as session:
        return list(
            session.execute(
                sa.select(WebhookDelivery).where(WebhookDelivery.webhook_id == webhook_id)
            ).scalars()
        )


def attempts(delivery_id: str) -> list[WebhookAttempt]:
    with session_scope() as session:
        return list(
            session.execute(
                sa.select(WebhookAttempt)
                .where(WebhookAttempt.delivery_id == delivery_id)
                .order_by(WebhookAttempt.id)
            ).scalars()
        )


def send_until(sender: Sender, done: Callable[[], Any], timeout: float = 20) -> Any:
    def round_done() -> Any:
        sender.run_round()
        sender.drain(10)
        return done()

    return wait_for(round_done, timeout, "the deliveries", interval=0.1)


def test_an_event_is_recorded_only_with_its_commit_and_only_for_its_project(
    project: dict[str, Any], receiver: Receiver
) -> None:
    hook, _ = subscribe(project, receiver.url, "job.succeeded", "job.failed")
    with session_scope() as session:
        _, other = create_token(session, f"other-{uuid.uuid4().hex[:8]}")
    finish_job({"id": other.project_id})  # another project's job: not ours to hear of
    job_id = finish_job(project, JobStatus.FAILED)
    # A change rolled back records nothing.
    with session_scope() as session:
        job = create_job(session, project["id"], name="rolled-back", trainer="mlp_digits")
    with pytest.raises(RuntimeError), session_scope() as session:
        transition_job(session=session, job_id=job.id, target=JobStatus.CANCELLED)
        raise RuntimeError("the change fails after the event was emitted")
    made = deliveries(hook)
    assert [d.event for d in made] == ["job.failed"]
    assert f'"id":{job_id},' in made[0].body and project["name"] in made[0].body
    with session_scope() as session:
        session.execute(sa.delete(Project).where(Project.id == other.project_id))


def test_a_delivery_arrives_signed_as_the_docs_verify_it(
    project: dict[str, Any], receiver: Receiver
) -> None:
    hook, secret = subscribe(project, receiver.url)
    job_id = finish_job(project)
    sender = Sender(settings(), session_scope)
    try:
        send_until(sender, lambda: deliveries(hook)[0].state == "delivered")
    finally:
        sender.close()
    [got] = receiver.bodies()
    verify = documented_verify()
    assert verify(secret, got.headers, got.body)
    assert not verify("whsec_other", got.headers, got.body)
    assert not verify(secret, got.headers, got.body + b" ")
    old = {**got.headers, "Cohort-Webhook-Timestamp": str(int(time.time()) - 3600)}
    assert not verify(secret, old, got.body)  # and a re-signed old one fails the signature
    body = got.json
    assert got.headers["Cohort-Webhook-Id"] == body["id"] == deliveries(hook)[0].id
    assert body["event"] == "job.succeeded" and body["project"] == project["name"]
    assert body["data"]["job"]["id"] == job_id and body["data"]["job"]["status"] == "succeeded"
    [attempt] = attempts(body["id"])
    assert (attempt.status_code, attempt.answer, attempt.error) == (200, "ok", "")


def test_a_receiver_down_then_failing_then_up_gets_it_under_one_id(
    project: dict[str, Any], receiver: Receiver
) -> None:
    hook, secret = subscribe(project, receiver.url)
    receiver.down()  # connections refused
    finish_job(project)
    sender = Sender(settings(), session_scope)
    try:
        send_until(sender, lambda: len(attempts(deliveries(hook)[0].id)) >= 2)
        receiver.mode = "error"
        receiver.up()
        send_until(sender, lambda: len(receiver.bodies()) >= 2)
        receiver.mode = "ok"
        send_until(sender, lambda: deliveries(hook)[0].state == "delivered")
    finally:
        sender.close()
    [delivery] = deliveries(hook)
    tried = attempts(delivery.id)
    assert tried[0].status_code is None and "ConnectError" in tried[0].error
    assert [a.status_code for a in tried if a.status_code] == [500] * (
        len(receiver.bodies()) - 1
    ) + [200]
    assert {r.headers["Cohort-Webhook-Id"] for r in receiver.bodies()} == {delivery.id}
    assert {r.body for r in receiver.bodies()} == {delivery.body.encode()}
    assert all(documented_verify()(secret, r.headers, r.body) for r in receiver.bodies())
    assert delivery.attempts == len(tried)


def test_a_redirect_is_a_failed_attempt_never_followed(
    project: dict[str, Any], receiver: Receiver
) -> None:
    inner = Receiver().up()  # an "internal" address the redirect points at
    try:
        hook, _ = subscribe(project, receiver.url)
        receiver.mode, receiver.location = "redirect", inner.url
        finish_job(project)
        sender = Sender(settings(), session_scope)
        try:
            send_until(sender, lambda: len(attempts(deliveries(hook)[0].id)) >= 2)
        finally:
            sender.close()
        assert inner.bodies() == []
        tried = attempts(deliveries(hook)[0].id)
        assert tried[0].status_code == 307 and "redirects are not followed" in tried[0].error
        assert deliveries(hook)[0].state == "pending"
    finally:
        inner.down()


def test_an_address_no_longer_allowed_is_refused_at_the_attempt(
    project: dict[str, Any], receiver: Receiver
) -> None:
    hook, _ = subscribe(project, receiver.url)  # allowed when it was made
    finish_job(project)
    sender = Sender(settings(WEBHOOK_ALLOWED_NETWORKS=""), session_scope)
    try:
        send_until(sender, lambda: attempts(deliveries(hook)[0].id))
    finally:
        sender.close()
    [attempt] = attempts(deliveries(hook)[0].id)
    assert attempt.status_code is None and "127.0.0.1 is a loopback address" in attempt.error
    assert receiver.bodies() == []


def test_a_delivery_is_given_up_after_its_retry_period(
    project: dict[str, Any], receiver: Receiver
) -> None:
    hook, _ = subscribe(project, receiver.url)
    receiver.mode = "error"
    finish_job(project)
    sender = Sender(settings(WEBHOOK_RETRY_FOR=1.5), session_scope)
    try:
        send_until(sender, lambda: deliveries(hook)[0].state == "failed")
    finally:
        sender.close()
    [delivery] = deliveries(hook)
    assert delivery.finished_at is not None
    assert (delivery.finished_at - delivery.created_at).total_seconds() >= 1.5
    assert len(attempts(delivery.id)) == delivery.attempts >= 2


def test_two_senders_never_claim_the_same_delivery(project: dict[str, Any]) -> None:
    hook, _ = subscribe(project, "http://127.0.0.1:9/never")
    for _ in range(30):
        finish_job(project)
    one = Sender(settings(), session_scope)
    try:
        with session_scope() as held:
            # Another sender mid-claim: its rows locked, its transaction still open.
            other = Sender(settings(), lambda: nullcontext(held))
            theirs = other.claim(limit=20)
            other.close()
            started = time.monotonic()
            mine = one.claim(limit=30)  # passes over the locked rows, waits for none
            assert time.monotonic() - started < 2
        assert (len(theirs), len(mine)) == (20, 10)
        assert not {c.id for c in mine} & {c.id for c in theirs}
        # Claimed and committed: each is held for the lease, by one sender alone.
        assert one.claim(limit=30) == []
        # And senders claiming at once from threads share them out, none twice.
        with session_scope() as session:
            session.execute(
                sa.update(WebhookDelivery)
                .where(WebhookDelivery.webhook_id == hook)
                .values(next_attempt_at=sa.func.now())
            )
        with ThreadPoolExecutor(4) as pool:
            claims = list(pool.map(lambda _: one.claim(limit=10), range(4)))
    finally:
        one.close()
    ids = [c.id for claim in claims for c in claim]
    assert len(ids) == len(set(ids)) == 30


def test_the_retry_waits_double_up_to_an_hour_with_jitter() -> None:
    rand = random.Random(7)
    waits = [retry_delay(n, 10.0, rand) for n in range(1, 12)]
    for n, wait in enumerate(waits, start=1):
        full = min(3600.0, 10.0 * 2 ** (n - 1))
        assert full / 2 <= wait <= full
    assert len({round(w, 6) for w in waits}) == len(waits)  # jittered, not one value


def test_finished_deliveries_are_deleted_after_the_keeping_period(
    project: dict[str, Any], receiver: Receiver
) -> None:
    hook, _ = subscribe(project, receiver.url)
    for _ in range(3):
        finish_job(project)
    sender = Sender(settings(WEBHOOK_KEEP_FOR=3600), session_scope)
    try:
        send_until(sender, lambda: all(d.state == "delivered" for d in deliveries(hook)))
        made = deliveries(hook)
        old, recent, pending = made[0].id, made[1].id, made[2].id
        with session_scope() as session:
            for delivery_id, state, age in ((old, "delivered", 7200), (recent, "failed", 60)):
                session.execute(
                    sa.update(WebhookDelivery)
                    .where(WebhookDelivery.id == delivery_id)
                    .values(state=state, finished_at=sa.func.now() - dt.timedelta(seconds=age))
                )
            session.execute(
                sa.update(WebhookDelivery)
                .where(WebhookDelivery.id == pending)
                .values(
                    state="pending",
                    finished_at=None,
                    created_at=sa.func.now() - dt.timedelta(days=2),
                )
            )
        assert attempts(old)
        assert sender.prune() == 1
    finally:
        sender.close()
    assert {d.id for d in deliveries(hook)} == {recent, pending}
    assert attempts(old) == []  # its attempts went with it
