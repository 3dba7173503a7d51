"""The OpenAPI document tells the truth: the bearer scheme on every authenticated route,
every error status in Cohort's body, and a description and example for every job and
schedule field."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

# Operations that answer without a token.
OPEN = {("/healthz", "get"), ("/readyz", "get")}
# Its bearer is the metrics token, not an API token; off (404) without one.
METRICS = ("/metrics", "get")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    from api.main import create_app

    response = TestClient(create_app()).get("/openapi.json")
    assert response.status_code == 200
    schema: dict[str, Any] = response.json()
    return schema


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, op) for path, ops in document["paths"].items() for method, op in ops.items()
    ]


def test_authenticated_routes_carry_the_bearer_scheme(document: dict[str, Any]) -> None:
    assert document["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": document["components"]["securitySchemes"]["bearer"]["description"],
    }
    for path, method, op in operations(document):
        names = {(p["in"], p["name"].lower()) for p in op.get("parameters", [])}
        assert ("header", "authorization") not in names, (path, method)
        assert ("cookie", "cohort_session") not in names, (path, method)
        if (path, method) in OPEN:
            assert "security" not in op, (path, method)
        elif (path, method) == METRICS:
            assert op["security"] == [{"bearer": []}]
            assert {"401", "404"} <= set(op["responses"]), op["responses"]
        else:
            assert op["security"] == [{"bearer": []}], (path, method)
            assert {"401", "403", "503"} <= set(op["responses"]), (path, method)


def test_every_error_status_is_documented_with_cohorts_body(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    assert set(schemas["ErrorBody"]["required"]) == {"error", "message"}
    assert "fields" in schemas["ErrorBody"]["properties"]
    for path, method, op in operations(document):
        for status, response in op["responses"].items():
            if int(status) >= 400:
                assert response["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorBody"
                }, (path, method, status)
                assert response["description"], (path, method, status)
        if any(p["in"] == "path" for p in op.get("parameters", [])):
            assert {"404", "422"} <= set(op["responses"]), (path, method)
        if "requestBody" in op:
            assert {"413", "422"} <= set(op["responses"]), (path, method)
    posts = document["paths"]
    for path in ("/api/v1/jobs", "/api/v1/schedules", "/api/v1/sweeps"):
        assert {"404", "413", "422", "429"} <= set(posts[path]["post"]["responses"]), path
    assert "Retry-After" in posts["/api/v1/jobs"]["post"]["responses"]["429"]["headers"]
    assert "Retry-After" in posts["/api/v1/jobs"]["post"]["responses"]["503"]["headers"]
    assert "409" in posts["/api/v1/jobs/{job_id}/cancel"]["post"]["responses"]


def test_ids_in_paths_are_bounded_to_their_sql_range(document: dict[str, Any]) -> None:
    for path, method, op in operations(document):
        for parameter in op.get("parameters", []):
            if parameter["name"] in ("job_id", "schedule_id", "sweep_id"):
                schema = parameter["schema"]
                bounded = (
                    schema
                    if "maximum" in schema
                    else next(s for s in schema["anyOf"] if s.get("type") == "integer")
                )
                assert bounded["maximum"] == 2**31 - 1, (path, method, parameter["name"])
                assert bounded["minimum"] == 1, (path, method, parameter["name"])


@pytest.mark.parametrize(
    "model",
    [
        "JobCreate",
        "Hyperparameters",
        "Roles",
        "RolePlacement",
        "ProfileRequest",
        "DistributionOptions",
        "ScheduleCreate",
        "ScheduleUpdate",
        "Promotion",
    ],
)
def test_every_job_and_schedule_field_has_a_description_and_an_example(
    document: dict[str, Any], model: str
) -> None:
    for name, field in document["components"]["schemas"][model]["properties"].items():
        assert field.get("description"), (model, name)
        assert field.get("examples"), (model, name)
