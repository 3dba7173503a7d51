import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.jobs.submission_batcher import SubmissionBatcher
from tests.factories import create_token


@contextmanager
def in_test_transaction(app: FastAPI, session: Session) -> Iterator[None]:
    """Every request of `app` in the test's rolled-back transaction: its session, its short
    transactions apart (`get_sessions`), and the admission of its job submissions (a
    batcher of this test's own, whose commits are savepoints; the request's thread waits
    meanwhile, so the session is never used by two threads at once)."""
    from api.deps import get_db, get_sessions, get_submitter

    def override() -> Iterator[Session]:
        yield session
        session.commit()  # a savepoint release: the test's transaction still rolls back

    @contextmanager
    def savepoint() -> Iterator[Session]:
        with session.begin_nested():
            yield session

    @contextmanager
    def admission() -> Iterator[Session]:
        # As session_scope ends a transaction, the session's own savepoint is released
        # once the group is admitted (the submission route holds no request session
        # whose commit would): the next request starts from the same state.
        with savepoint():
            yield session
        session.commit()

    batcher = SubmissionBatcher(sessions=admission, threads=1)
    app.dependency_overrides[get_db] = override
    app.dependency_overrides[get_submitter] = lambda: batcher
    app.dependency_overrides[get_sessions] = lambda: savepoint
    try:
        yield
    finally:
        batcher.close()


@pytest.fixture
def client(session: Session) -> Iterator[TestClient]:
    """The app with every request's session inside the test's rolled-back transaction."""
    from api.main import create_app

    app = create_app()
    with in_test_transaction(app, session):
        # No lifespan: the bootstrap token would commit for real. Origin: as a browser
        # sends it on every POST (the dashboard's cookie requests are refused without it,
        # api/csrf.py); an address of its own: failed logins are counted per address
        # (api/login_throttle.py).
        yield TestClient(
            app,
            headers={"Origin": "http://testserver"},
            client=(f"testclient-{uuid.uuid4().hex[:8]}", 50000),
        )


@pytest.fixture
def token(session: Session) -> str:
    return create_token(session, "default")[0]


@pytest.fixture
def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
