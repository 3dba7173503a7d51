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
    yield TestClient(app)  # no lifespan: the bootstrap token would commit for real


@pytest.fixture
def token(session: Session) -> str:
    return create_token(session, "default")[0]


@pytest.fixture
def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
