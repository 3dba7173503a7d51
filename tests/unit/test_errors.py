"""Every domain error's HTTP answer: status, body and headers, as clients read them."""

from __future__ import annotations

from typing import Annotated

import pytest
from fastapi import FastAPI, Query
from fastapi.testclient import TestClient

from api.errors import install_error_handlers
from services.exceptions import (
    IdempotencyConflict,
    InvalidJobSpec,
    InvalidTransition,
    JobNotFound,
    NoPromotedModel,
    ScheduleConflict,
    ScheduleNotFound,
    Unauthorized,
)

CASES = [
    (JobNotFound(7), 404, {"error": "not_found", "message": "job 7 not found"}),
    (ScheduleNotFound(3), 404, {"error": "not_found", "message": "schedule 3 not found"}),
    (NoPromotedModel(3), 404, {"error": "not_found", "message": str(NoPromotedModel(3))}),
    (
        InvalidJobSpec("trainer", "unknown trainer 'x'"),
        422,
        {
            "error": "invalid_request",
            "message": "trainer: unknown trainer 'x'",
            "fields": [{"field": "trainer", "message": "unknown trainer 'x'"}],
        },
    ),
    (
        InvalidTransition(5, "running", "queued"),
        409,
        {"error": "conflict", "message": "job 5 cannot go from running to queued"},
    ),
    (
        InvalidTransition(5, "cancelled", "cancelled"),
        409,
        {
            "error": "conflict",
            "message": "job 5 cannot go from cancelled to cancelled: the job has already finished",
        },
    ),
    (
        IdempotencyConflict("key reused with another spec"),
        409,
        {"error": "idempotency_conflict", "message": "key reused with another spec"},
    ),
    (
        ScheduleConflict("name", "a schedule named n exists"),
        409,
        {
            "error": "conflict",
            "message": "name: a schedule named n exists",
            "fields": [{"field": "name", "message": "a schedule named n exists"}],
        },
    ),
    (Unauthorized("no token"), 401, {"error": "unauthorized", "message": "no token"}),
]


@pytest.fixture(scope="module")
def client() -> TestClient:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/raise/{case}")
    def _raise(case: int, limit: Annotated[int, Query(ge=1)] = 1) -> None:  # noqa: ARG001
        raise CASES[case][0]

    return TestClient(app)


@pytest.mark.parametrize("case", range(len(CASES)), ids=[type(c[0]).__name__ for c in CASES])
def test_each_domain_error_has_its_status_and_body(client: TestClient, case: int) -> None:
    _, status, body = CASES[case]
    response = client.get(f"/raise/{case}")
    assert response.status_code == status
    assert response.json() == body


def test_unauthorized_asks_for_a_bearer_token(client: TestClient) -> None:
    response = client.get(f"/raise/{len(CASES) - 1}")
    assert response.headers["www-authenticate"] == "Bearer"
    assert "www-authenticate" not in client.get("/raise/0").headers


def test_a_bad_query_names_the_field_and_the_fix(client: TestClient) -> None:
    response = client.get("/raise/0?limit=0")
    assert response.status_code == 422
    message = "Input should be greater than or equal to 1 (use a larger value)"
    assert response.json() == {
        "error": "invalid_request",
        "message": f"limit: {message}",
        "fields": [{"field": "limit", "message": message}],
    }
