"""Job submissions verify their bearer token from a short in-process cache
(services/auth/token_cache.py): a token revoked by another process is refused within a
second, one revoked through this process at once, one expired at once; unknown and
refused tokens are never remembered."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.auth.scopes import Scope
from services.auth.token_cache import TTL_SECONDS, TokenCache, process_cache
from services.exceptions import Unauthorized
from services.models import ApiToken, utcnow
from tests.factories import create_token
from tests.fake_clock import Clock

JOB = {"name": "j", "strategy": "one_device", "replicas": 1}


def _revoke_as_another_process(session: Session, token_id: int) -> None:
    # SQL alone, as another api process or `cohort token revoke` elsewhere would: this
    # process's cache is not told.
    session.execute(sa.update(ApiToken).where(ApiToken.id == token_id).values(revoked_at=utcnow()))
    session.flush()


def test_a_token_revoked_elsewhere_is_refused_within_a_second(
    client: TestClient, session: Session
) -> None:
    secret, row = create_token(session, "default")
    auth = {"Authorization": f"Bearer {secret}"}
    assert client.post("/api/v1/jobs", headers=auth, json=JOB).status_code == 201
    assert process_cache().get(secret) is not None  # remembered: the next one reads no SQL
    _revoke_as_another_process(session, row.id)
    revoked_at = time.monotonic()
    # Submit as fast as the client can for 1.5 s: whatever the cache still let in must
    # have been sent within the first second, and once refused, refused for good.
    answers: list[tuple[float, int]] = []
    while time.monotonic() - revoked_at < 1.5:
        sent = time.monotonic() - revoked_at
        answers.append((sent, client.post("/api/v1/jobs", headers=auth, json=JOB).status_code))
    accepted = [sent for sent, code in answers if code == 201]
    refused = [sent for sent, code in answers if code == 401]
    assert len(accepted) + len(refused) == len(answers), answers
    assert all(sent < 1.0 for sent in accepted), accepted
    assert refused and all(sent > max(accepted, default=-1.0) for sent in refused)
    assert any(sent >= 1.0 for sent in refused)  # the loop ran past the second


def test_a_token_revoked_through_this_process_is_refused_at_once(
    client: TestClient, session: Session
) -> None:
    admin = {"Authorization": f"Bearer {create_token(session, 'default', (Scope.ADMIN,))[0]}"}
    secret, row = create_token(session, "default")
    auth = {"Authorization": f"Bearer {secret}"}
    assert client.post("/api/v1/jobs", headers=auth, json=JOB).status_code == 201
    assert client.delete(f"/api/v1/tokens/{row.id}", headers=admin).status_code == 200
    refused = client.post("/api/v1/jobs", headers=auth, json=JOB)
    assert refused.status_code == 401
    assert "'test' was revoked" in refused.json()["message"]


def test_a_cached_token_that_expires_is_refused_at_once(
    client: TestClient, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two clocks held by hand: the cache's (its entry stays fresh, however long the
    requests take) and the api's wall clock, moved past the token's expiry between the two
    requests. (With real time the token expired 300 ms after it was made, and on a busy
    machine the first request came later: a rehearsal's 401 where 201 was due.)"""
    from api import deps

    monkeypatch.setattr(process_cache(), "clock", Clock())
    secret, row = create_token(session, "default")
    row.expires_at = utcnow() + dt.timedelta(hours=1)
    session.flush()
    auth = {"Authorization": f"Bearer {secret}"}
    assert client.post("/api/v1/jobs", headers=auth, json=JOB).status_code == 201
    assert process_cache().get(secret) is not None
    past_expiry = row.expires_at + dt.timedelta(seconds=1)
    monkeypatch.setattr(deps, "utcnow", lambda: past_expiry)
    assert process_cache().get(secret) is not None  # still cached: the check is the cache's
    refused = client.post("/api/v1/jobs", headers=auth, json=JOB)
    assert refused.status_code == 401 and "expired" in refused.json()["message"]


def test_unknown_and_refused_tokens_are_never_remembered(
    client: TestClient, session: Session
) -> None:
    unknown = {"Authorization": "Bearer coh_not-a-token-at-all-0123456789"}
    assert client.post("/api/v1/jobs", headers=unknown, json=JOB).status_code == 401
    assert process_cache().get("coh_not-a-token-at-all-0123456789") is None
    secret, row = create_token(session, "default")
    _revoke_as_another_process(session, row.id)
    auth = {"Authorization": f"Bearer {secret}"}
    assert client.post("/api/v1/jobs", headers=auth, json=JOB).status_code == 401
    assert process_cache().get(secret) is None
    # A read-only token is remembered (it is usable) but still refused the submit scope.
    reader, _ = create_token(session, "default", (Scope.READ,))
    answer = client.post("/api/v1/jobs", headers={"Authorization": f"Bearer {reader}"}, json=JOB)
    assert answer.status_code == 403 and "'submit'" in answer.json()["message"]


def test_entries_last_their_ttl_counted_from_the_reading() -> None:
    clock = Clock(100.0)
    cache = TokenCache(clock=clock)
    token = ApiToken(id=1, project_id=1, name="t", scopes=["submit"])
    reading = cache.reading()
    clock.now += 0.3  # the row took 0.3 s to read
    cache.remember("secret", token, reading)
    assert cache.get("secret") is token
    clock.now += TTL_SECONDS - 0.3 - 0.001
    assert cache.get("secret") is token
    clock.now += 0.001
    assert cache.get("secret") is None
    assert TTL_SECONDS <= 1.0


def test_a_row_read_before_a_revocation_is_not_stored_after_it() -> None:
    cache = TokenCache(clock=Clock(100.0))
    token = ApiToken(id=1, project_id=1, name="t", scopes=["submit"])
    reading = cache.reading()
    cache.forget()  # a revocation in this process, while the row was being read
    cache.remember("secret", token, reading)
    assert cache.get("secret") is None
    cache.remember("secret", token, cache.reading())
    assert cache.get("secret") is token
    cache.forget()
    assert cache.get("secret") is None


@pytest.mark.parametrize("scheme", ["Basic", "Bearer"])
def test_a_missing_or_other_scheme_credential_is_a_401(client: TestClient, scheme: str) -> None:
    answer = client.post("/api/v1/jobs", headers={"Authorization": f"{scheme} "}, json=JOB)
    assert answer.status_code == 401 and "bearer" in answer.json()["message"].lower()


def test_the_answer_is_the_job_as_read_back(client: TestClient, session: Session) -> None:
    """Built from the admitted job without reading it back, and serialized once: the same
    fields and values as `GET /jobs/{id}` answers (which adds the job's progress)."""
    secret, _ = create_token(session, "default")
    auth = {"Authorization": f"Bearer {secret}"}
    spec = {**JOB, "pip": ["numpy==2.0.0"], "hyperparameters": {"epochs": 2}, "priority": 3}
    submitted = client.post("/api/v1/jobs", headers=auth, json=spec)
    assert submitted.status_code == 201
    assert submitted.headers["content-type"] == "application/json"
    answer = submitted.json()
    read = client.get(f"/api/v1/jobs/{answer['id']}", headers=auth).json()
    assert answer["progress"] is None and answer["scaling"] is None  # as a list shows it
    assert answer == {**read, "progress": None, "scaling": None}
    assert answer["queue_position"] == 1 and answer["requirements"] == ["numpy==2.0.0"]


def _counting_reader(monkeypatch: pytest.MonkeyPatch, answer: ApiToken | Exception) -> list[float]:
    """Stands for the token's SQL read: counts the reads, each taking 50 ms."""
    from api import deps

    reads: list[float] = []

    def read(*_: object) -> ApiToken:
        reads.append(time.monotonic())
        time.sleep(0.05)
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(deps, "get_upload_token", read)
    return reads


def test_requests_that_miss_together_share_one_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from api.deps import get_cached_token

    token = ApiToken(id=1, project_id=1, name="t", scopes=["submit"], last_used_at=utcnow())
    reads = _counting_reader(monkeypatch, token)
    secret = f"coh_shared-{time.monotonic_ns()}"

    async def burst() -> list[ApiToken]:
        asks = [get_cached_token(None, f"Bearer {secret}") for _ in range(30)]  # type: ignore[arg-type]
        return await asyncio.gather(*asks)

    assert asyncio.run(burst()) == [token] * 30
    assert len(reads) == 1
    assert process_cache().get(secret) is token


def test_a_refused_read_is_shared_and_never_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    from api.deps import get_cached_token

    reads = _counting_reader(monkeypatch, Unauthorized("unknown token"))
    secret = f"coh_refused-{time.monotonic_ns()}"

    async def burst() -> list[ApiToken | BaseException]:
        asks = [get_cached_token(None, f"Bearer {secret}") for _ in range(10)]  # type: ignore[arg-type]
        return await asyncio.gather(*asks, return_exceptions=True)

    answers = asyncio.run(burst())
    assert all(isinstance(a, Unauthorized) for a in answers) and len(reads) == 1
    assert process_cache().get(secret) is None


def test_a_sharer_cancelled_does_not_cancel_the_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from api.deps import get_cached_token

    token = ApiToken(id=1, project_id=1, name="t", scopes=["submit"], last_used_at=utcnow())
    reads = _counting_reader(monkeypatch, token)
    secret = f"coh_cancelled-{time.monotonic_ns()}"

    async def two() -> ApiToken:
        first = asyncio.create_task(get_cached_token(None, f"Bearer {secret}"))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        second = asyncio.create_task(get_cached_token(None, f"Bearer {secret}"))  # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        first.cancel()  # the request that started the read: its client went away
        return await second

    assert asyncio.run(two()) is token and len(reads) == 1
