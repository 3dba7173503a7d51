"""Limits against PostgreSQL: bounded bodies (413 before they are read whole), finite JSON
numbers, bounded hyperparameters and model sizes, ids and cursors in their SQL range (422,
never 500), 405 with `Allow`, 503 with `Retry-After` when the database is down."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.models import Job
from tests.api.conftest import in_test_transaction
from tests.api.test_dashboard import login
from tests.conftest import database_refused

SPEC: dict[str, Any] = {
    "name": "digits",
    "trainer": "mlp_digits",
    "replicas": 2,
    "hyperparameters": {"epochs": 2, "steps_per_epoch": 5},
}
TOO_BIG = "99999999999999999999"  # past 64 bits


def jobs_stored(session: Session) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(Job)).scalar_one()


def refusal(response: Any, status: int, field: str | None = None) -> dict[str, Any]:
    """Cohort's error body of a `status` answer, naming `field` if given."""
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["error"] and body["message"], body
    if field is not None:
        assert field in [f["field"] for f in body["fields"]], body
    return body


@pytest.fixture
def small_bodies(session: Session, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The app with COHORT_MAX_REQUEST_BYTES=4096 in its environment."""
    from api.main import create_app
    from services.settings import get_settings

    monkeypatch.setenv("COHORT_MAX_REQUEST_BYTES", "4096")
    get_settings.cache_clear()
    app = create_app()
    with in_test_transaction(app, session):
        yield TestClient(app)
    monkeypatch.undo()
    get_settings.cache_clear()


def test_a_body_declared_over_the_limit_is_413_before_it_is_read(
    small_bodies: TestClient, auth: dict[str, str], session: Session
) -> None:
    body = json.dumps({**SPEC, "name": "x" * 5000}).encode()
    response = small_bodies.post(
        "/api/v1/jobs", content=body, headers={**auth, "Content-Type": "application/json"}
    )
    refused = refusal(response, 413)
    assert refused["error"] == "too_large" and "COHORT_MAX_REQUEST_BYTES" in refused["message"]
    assert "4096" in refused["message"]
    assert jobs_stored(session) == 0


def test_a_chunked_body_is_counted_as_it_streams(
    small_bodies: TestClient, auth: dict[str, str], session: Session
) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: sent chunked
        yield b'{"name": "digits", "hyperparameters": {"notes": "'
        for _ in range(100):
            yield b"x" * 100
        yield b'"}}'

    response = small_bodies.post(
        "/api/v1/jobs", content=chunks(), headers={**auth, "Content-Type": "application/json"}
    )
    assert refusal(response, 413)["error"] == "too_large"
    assert jobs_stored(session) == 0


def test_a_body_under_the_limit_and_an_upload_over_it_are_taken(
    small_bodies: TestClient, auth: dict[str, str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert small_bodies.post("/api/v1/jobs", json=SPEC, headers=auth).status_code == 201
    monkeypatch.setenv("COHORT_ARTIFACT_URL", str(tmp_path / "artifacts"))
    data = b"x,y\n" * 10_000  # 40 kB: an upload keeps its own bound (COHORT_MAX_DATA_BYTES)
    response = small_bodies.put("/api/v1/data/big.csv", content=data, headers=auth)
    assert response.status_code == 201, response.text


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"hyperparameters": {"dropout": Infinity}}', "hyperparameters.dropout"),
        ('{"hyperparameters": {"decay": [0.1, NaN]}}', "hyperparameters.decay.1"),
        ('{"hyperparameters": {"learning_rate": -Infinity}}', "hyperparameters.learning_rate"),
        ('{"hyperparameters": {"scale": 1e999}}', "hyperparameters.scale"),
        ('{"priority": NaN}', "priority"),
    ],
)
def test_a_non_finite_number_anywhere_is_422_naming_it(
    client: TestClient, auth: dict[str, str], session: Session, raw: str, field: str
) -> None:
    response = client.post(
        "/api/v1/jobs", content=raw, headers={**auth, "Content-Type": "application/json"}
    )
    assert "finite" in refusal(response, 422, field)["message"]
    assert jobs_stored(session) == 0


def test_non_finite_numbers_in_schedules_and_sweeps_are_422(
    client: TestClient, auth: dict[str, str]
) -> None:
    schedule = (
        '{"name": "nightly", "interval_seconds": 3600, "job": {"trainer": '
        '"mlp_digits", "hyperparameters": {"x": NaN}}}'
    )
    response = client.post(
        "/api/v1/schedules", content=schedule, headers={**auth, "Content-Type": "application/json"}
    )
    refusal(response, 422, "job.hyperparameters.x")
    sweep = (
        '{"template": {"trainer": "mlp_digits"}, "objective": {"metric": "loss", '
        '"mode": "min"}, "space": {"grid": {"learning_rate": [0.1, Infinity]}}}'
    )
    response = client.post(
        "/api/v1/sweeps", content=sweep, headers={**auth, "Content-Type": "application/json"}
    )
    refusal(response, 422, "space.grid.learning_rate.1")


@pytest.mark.parametrize("raw", [b"[" * 100_000 + b"]" * 100_000, b'{"name": "\xff\xfe"}'])
def test_a_body_nested_past_the_parser_or_not_utf8_is_422(
    client: TestClient, auth: dict[str, str], raw: bytes
) -> None:
    response = client.post(
        "/api/v1/jobs", content=raw, headers={**auth, "Content-Type": "application/json"}
    )
    refusal(response, 422, "body")


@pytest.mark.parametrize(
    ("trainer", "hyperparameters", "field", "allowed"),
    [
        ("mlp_digits", {"hidden_units": 10**12}, "hyperparameters.hidden_units", "1 to 4096"),
        ("mlp_digits", {"hidden_units": 64.5}, "hyperparameters.hidden_units", "1 to 4096"),
        ("cnn_digits", {"filters": 0}, "hyperparameters.filters", "1 to 256"),
        ("mlp_digits", {"seed": 2**40}, "hyperparameters.seed", "0 to 4294967295"),
        (
            "mlp_digits",
            {"epochs": 100_000, "steps_per_epoch": 10_000_000},
            "hyperparameters.steps_per_epoch",
            "100,000,000",
        ),
        (
            "mlp_digits",
            {"steps_per_epoch": 10**12},
            "hyperparameters.steps_per_epoch",
            "less than or equal to 10000000",
        ),
    ],
)
def test_model_and_run_size_hyperparameters_are_bounded(
    client: TestClient,
    auth: dict[str, str],
    session: Session,
    trainer: str,
    hyperparameters: dict[str, Any],
    field: str,
    allowed: str,
) -> None:
    response = client.post(
        "/api/v1/jobs",
        json={**SPEC, "trainer": trainer, "hyperparameters": hyperparameters},
        headers=auth,
    )
    body = refusal(response, 422, field)
    assert allowed in body["message"], body
    assert jobs_stored(session) == 0


def test_hyperparameters_are_bounded_in_keys_and_depth(
    client: TestClient, auth: dict[str, str]
) -> None:
    many = {f"k{i}": i for i in range(1001)}
    response = client.post("/api/v1/jobs", json={**SPEC, "hyperparameters": many}, headers=auth)
    assert "COHORT_MAX_HYPERPARAMETERS_KEYS" in refusal(response, 422, "hyperparameters")["message"]
    deep: dict[str, Any] = {"leaf": 1}
    for _ in range(8):
        deep = {"nested": deep}
    response = client.post("/api/v1/jobs", json={**SPEC, "hyperparameters": deep}, headers=auth)
    assert (
        "COHORT_MAX_HYPERPARAMETERS_DEPTH" in refusal(response, 422, "hyperparameters")["message"]
    )
    # At the limits: taken.
    response = client.post(
        "/api/v1/jobs",
        json={**SPEC, "hyperparameters": {"hidden_units": 4096, "config": {"a": {"b": [1, 2]}}}},
        headers=auth,
    )
    assert response.status_code == 201, response.text


def test_a_sweep_whose_trials_exceed_a_model_bound_is_422_naming_the_parameter(
    client: TestClient, auth: dict[str, str]
) -> None:
    sweep = {
        "template": {"trainer": "mlp_digits", "replicas": 1, "strategy": "one_device"},
        "objective": {"metric": "loss", "mode": "min"},
        "space": {"grid": {"hidden_units": [64, 10**9]}},
    }
    response = client.post("/api/v1/sweeps", json=sweep, headers=auth)
    assert "1 to 4096" in refusal(response, 422, "space.grid.hidden_units")["message"]


# (The job stream bounds its id the same way: tests/streams run it on committed tokens.)
ID_PATHS = [
    ("get", "/api/v1/jobs/{id}"),
    ("post", "/api/v1/jobs/{id}/cancel"),
    ("get", "/api/v1/jobs/{id}/events"),
    ("get", "/api/v1/jobs/{id}/logs"),
    ("get", "/api/v1/jobs/{id}/metrics"),
    ("get", "/api/v1/jobs/{id}/artifacts"),
    ("get", "/api/v1/schedules/{id}"),
    ("patch", "/api/v1/schedules/{id}"),
    ("delete", "/api/v1/schedules/{id}"),
    ("post", "/api/v1/schedules/{id}/trigger"),
    ("get", "/api/v1/sweeps/{id}"),
    ("post", "/api/v1/sweeps/{id}/cancel"),
]


@pytest.mark.parametrize(("method", "path"), ID_PATHS)
def test_an_id_past_its_sql_range_is_422_and_an_absent_one_404(
    client: TestClient, auth: dict[str, str], method: str, path: str
) -> None:
    body = {} if method == "patch" else None
    for value in (TOO_BIG, str(2**63), str(2**31), "0", "-1"):
        response = client.request(method, path.format(id=value), headers=auth, json=body)
        refused = refusal(response, 422)
        assert refused["fields"][0]["field"].endswith("_id"), refused
    response = client.request(method, path.format(id=2**31 - 1), headers=auth, json=body)
    assert refusal(response, 404)["error"] == "not_found"


def test_ids_in_queries_and_cursors_are_bounded(client: TestClient, auth: dict[str, str]) -> None:
    for query in ({"schedule_id": TOO_BIG}, {"sweep_id": str(2**31)}):
        refusal(client.get("/api/v1/jobs", params=query, headers=auth), 422, next(iter(query)))
    job_id = client.post("/api/v1/jobs", json=SPEC, headers=auth).json()["id"]
    # A cursor past every id starts from the newest; one no page could return is a 422.
    for path in ("/api/v1/jobs", "/api/v1/sweeps"):
        response = client.get(path, params={"cursor": TOO_BIG[:19]}, headers=auth)
        assert response.status_code == 200, response.text
        refusal(client.get(path, params={"cursor": TOO_BIG}, headers=auth), 422, "cursor")
    assert (
        len(client.get("/api/v1/jobs", params={"cursor": "9" * 19}, headers=auth).json()["items"])
        == 1
    )
    for query in ({"replica": TOO_BIG}, {"attempt": str(2**31)}, {"since_step": TOO_BIG}):
        refusal(
            client.get(f"/api/v1/jobs/{job_id}/metrics", params=query, headers=auth),
            422,
            next(iter(query)),
        )


def test_the_dashboards_pages_bound_their_ids(client: TestClient, token: str) -> None:
    login(client, token)
    for path in ("/jobs/", "/partials/jobs/", "/sweeps/", "/partials/sweeps/"):
        assert client.get(path + TOO_BIG).status_code == 422
        assert client.get(path + str(2**31 - 1)).status_code == 404


def test_a_method_a_path_does_not_take_is_405_listing_every_one_it_does(
    client: TestClient, auth: dict[str, str]
) -> None:
    response = client.delete("/api/v1/jobs", headers=auth)
    assert refusal(response, 405)["error"] == "method_not_allowed"
    assert set(response.headers["allow"].split(", ")) == {"GET", "POST"}
    response = client.put("/api/v1/schedules/1", headers=auth)
    assert set(response.headers["allow"].split(", ")) == {"GET", "PATCH", "DELETE"}
    assert refusal(client.get("/api/v1/nothing", headers=auth), 404)["error"] == "not_found"


def test_a_database_that_does_not_answer_is_503_with_retry_after(pg_url: str, token: str) -> None:  # noqa: ARG001 - pg_url: the database put back after
    from api.main import create_app

    with database_refused():
        response = TestClient(create_app()).get(
            "/api/v1/jobs", headers={"Authorization": f"Bearer {token}"}
        )
    assert refusal(response, 503)["error"] == "unavailable"
    assert response.headers["retry-after"] == "5"
    assert "database" in response.json()["message"]


def test_readyz_is_503_while_the_database_does_not_answer(pg_url: str) -> None:  # noqa: ARG001 - pg_url: the database put back after
    from api.main import create_app

    with database_refused():
        response = TestClient(create_app()).get("/readyz")
    assert response.status_code == 503
    assert response.json()["database"] == "database unreachable"


def _raising_app(exc: Exception) -> TestClient:
    """An app with Cohort's error handlers and one route that raises `exc` (as a query
    does when the server goes away under it)."""
    from fastapi import FastAPI

    from api.errors import install_error_handlers

    app = FastAPI()
    install_error_handlers(app)

    @app.get("/query")
    def query() -> None:
        raise exc

    return TestClient(app, raise_server_exceptions=False)


def _driver_error(cls: type[sa.exc.DBAPIError], invalidated: bool = False) -> sa.exc.DBAPIError:
    return cls(
        "SELECT 1",
        {},
        Exception("server closed the connection unexpectedly"),
        connection_invalidated=invalidated,
    )


@pytest.mark.parametrize(
    "exc",
    [
        _driver_error(sa.exc.OperationalError),  # refused, reset, the server shutting down
        _driver_error(sa.exc.InterfaceError),  # a connection psycopg already knows is closed
        _driver_error(sa.exc.DatabaseError, invalidated=True),  # SQLAlchemy saw the disconnect
        sa.exc.TimeoutError("QueuePool limit reached"),  # no pooled connection in time
    ],
    ids=["operational", "interface", "invalidated", "pool-timeout"],
)
def test_a_connection_lost_mid_request_is_503_with_retry_after(exc: Exception) -> None:
    response = _raising_app(exc).get("/query")
    assert refusal(response, 503)["error"] == "unavailable"
    assert response.headers["retry-after"] == "5"
    assert "database" in response.json()["message"]


def test_any_other_database_error_stays_a_500() -> None:
    """A constraint broken or bad SQL is a bug: a retry would fail the same way."""
    for exc in (_driver_error(sa.exc.IntegrityError), _driver_error(sa.exc.ProgrammingError)):
        assert _raising_app(exc).get("/query").status_code == 500


def test_every_api_route_with_a_json_body_refuses_non_finite_numbers() -> None:
    """A new router with a JSON body needs `route_class=CohortRoute` (api/json_body.py)."""
    from fastapi.routing import iter_route_contexts

    from api.json_body import CohortRoute
    from api.main import create_app

    with_bodies = [
        route
        for route in iter_route_contexts(create_app().routes)
        if getattr(route, "body_field", None) is not None and str(route.path).startswith("/api/")
    ]
    assert len(with_bodies) >= 4  # jobs, schedules (create, update), sweeps
    for route in with_bodies:
        assert isinstance(route.original_route, CohortRoute), route.path


def test_a_nul_character_in_text_matched_against_sql_is_422(
    client: TestClient, auth: dict[str, str]
) -> None:
    job_id = client.post("/api/v1/jobs", json=SPEC, headers=auth).json()["id"]
    refusal(client.get("/api/v1/jobs", params={"name": "a\x00b"}, headers=auth), 422, "name")
    response = client.get(
        f"/api/v1/jobs/{job_id}/metrics", params={"name": ["loss", "x\x00"]}, headers=auth
    )
    refusal(response, 422, "name.1")
