import uuid
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests.factories import create_token


@pytest.fixture
def client(session: Session) -> Iterator[TestClient]:
    """The app with every request's session inside the test's rolled-back transaction."""
    from api.deps import get_db
    from api.main import create_app

    app = create_app()

    def override() -> Iterator[Session]:
        yield session
        session.commit()  # a savepoint release: the test's transaction still rolls back

    app.dependency_overrides[get_db] = override
    # No lifespan: the bootstrap token would commit for real. Origin: as a browser sends
    # it on every POST (the dashboard's cookie requests are refused without it, api/csrf.py);
    # an address of its own: failed logins are counted per address (api/login_throttle.py).
    yield TestClient(app, headers={"Origin": "http://testserver"},
                     client=(f"testclient-{uuid.uuid4().hex[:8]}", 50000))


@pytest.fixture
def token(session: Session) -> str:
    return create_token(session, "default")[0]


@pytest.fixture
def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
