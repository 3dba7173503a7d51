"""The OpenAPI document told truthfully: the bearer scheme on the authenticated routes,
and every error status a route can answer, in Cohort's error body.

One table (ERRORS) describes each error status once. Most statuses follow from an
operation's shape in the document (authenticated: 401 and 403; a path parameter: 404;
parameters or a body: 422; a body: 413; anything but /healthz: 503); the few that depend
on what a route does (409, 429, a 404 without an id in the path) are declared on the
route with `responses=errors(...)`. The document is FastAPI's, completed by `document`.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, Field

from api.deps import SESSION_COOKIE


class FieldProblem(BaseModel):
    """One refused field and how to put it right."""

    field: str = Field(
        description="where: a dotted path in the body, or a parameter's name",
        examples=["hyperparameters.hidden_units"],
    )
    message: str = Field(
        description="what is wrong and the fix",
        examples=["mlp_digits takes a whole number from 1 to 4096; got 1000000000000"],
    )


class ErrorBody(BaseModel):
    """Every error Cohort answers with: a code, a message a person can act on, and (for a
    refused request) the fields at fault."""

    error: str = Field(
        description="a stable code: invalid_request, unauthorized, forbidden, "
        "not_found, conflict, too_large, too_many_requests, unavailable, ...",
        examples=["invalid_request"],
    )
    message: str = Field(
        description="what happened and what to do",
        examples=[
            "hyperparameters.hidden_units: mlp_digits takes a whole "
            "number from 1 to 4096; got 1000000000000"
        ],
    )
    fields: list[FieldProblem] | None = Field(
        None, description="422: each refused field (some other errors name one too)"
    )


def _retry_after(what: str) -> dict[str, Any]:
    return {"Retry-After": {"description": what, "schema": {"type": "integer", "minimum": 0}}}


# status -> how Cohort answers it: the description, and any headers that come with it.
ERRORS: dict[int, dict[str, Any]] = {
    401: {
        "description": "no valid token: send `Authorization: Bearer <token>`",
        "headers": {"WWW-Authenticate": {"description": "Bearer", "schema": {"type": "string"}}},
    },
    403: {"description": "the token may not do this (it lacks the scope the route needs)"},
    404: {
        "description": "no such object in the caller's project (another project's objects "
        "answer 404 as well), or data or a bundle the spec names is missing"
    },
    409: {
        "description": "conflicts with the object's state: e.g. cancelling a finished job, "
        "a name already taken, an Idempotency-Key reused with another spec"
    },
    413: {
        "description": "the request body is over COHORT_MAX_REQUEST_BYTES (1 MiB by "
        "default; uploads have their own bounds); refused before it is read"
    },
    422: {
        "description": "the request is refused: `fields` names each field at fault and "
        "the fix (out-of-range numbers, NaN or Infinity, unknown fields, ...)"
    },
    429: {
        "description": "over the project's quota, or too many attempts; retry later",
        "headers": _retry_after("seconds to wait, when waiting helps"),
    },
    503: {
        "description": "the database or Redis is not answering; retry later",
        "headers": _retry_after("seconds to wait before retrying"),
    },
}

BEARER = "bearer"
# Parameters the bearer scheme stands for: clients send the header it describes, and
# the dashboard's login cookie is for browsers.
_AUTH_PARAMS = {("header", "authorization"), ("cookie", SESSION_COOKIE)}
# Routes that answer without the database or Redis.
_NEVER_UNAVAILABLE = {"/healthz"}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route that can answer these statuses beyond the ones its shape
    implies (see the module's docstring)."""
    return {status: {"model": ErrorBody, **ERRORS[status]} for status in statuses}


def _error_schemas() -> dict[str, Any]:
    """ErrorBody and the models it holds, as components."""
    schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    return {**schema.pop("$defs", {}), "ErrorBody": schema}


def _is_authenticated(operation: dict[str, Any]) -> bool:
    """Whether the operation wants a token: it declares a security scheme, or reads the
    Authorization header (as api.deps.get_token does)."""
    return bool(operation.get("security")) or any(
        (p.get("in"), str(p.get("name", "")).lower()) == ("header", "authorization")
        for p in operation.get("parameters", [])
    )


def implied_errors(path: str, operation: dict[str, Any]) -> set[int]:
    """The error statuses an operation can answer by its shape alone."""
    statuses: set[int] = set()
    places = {p.get("in") for p in operation.get("parameters", [])}
    if _is_authenticated(operation):
        statuses |= {401, 403}
    if "path" in places:
        statuses |= {404, 422}
    if places - {"path"}:
        statuses.add(422)
    if "requestBody" in operation:
        statuses |= {413, 422}
    if path not in _NEVER_UNAVAILABLE:
        statuses.add(503)
    return statuses


_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}


def _document_errors(path: str, operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    declared = {int(status) for status in responses if status.isdigit() and int(status) >= 400}
    for status in sorted(implied_errors(path, operation) | declared):
        own = responses.get(str(status), {})
        # A route's own words about a status win; the body is always Cohort's (this
        # replaces FastAPI's HTTPValidationError for 422).
        description = (
            own.get("description")
            if status in declared and own.get("description") != "Validation Error"
            else None
        )
        responses[str(status)] = {
            **ERRORS.get(status, {}),
            **own,
            "description": description or ERRORS.get(status, {}).get("description", "error"),
            "content": _ERROR_CONTENT,
        }
    operation["responses"] = dict(sorted(responses.items()))


def _bearer_scheme(schema: dict[str, Any]) -> str:
    """The name of the bearer scheme in the document (added if it has none)."""
    schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
    for name, scheme in schemes.items():
        if scheme.get("type") == "http" and scheme.get("scheme", "").lower() == "bearer":
            return str(name)
    schemes[BEARER] = {
        "type": "http",
        "scheme": "bearer",
        "description": "a Cohort token (COHORT_BOOTSTRAP_TOKEN, or one an admin made)",
    }
    return BEARER


def _require_bearer(operation: dict[str, Any], scheme: str) -> None:
    operation["security"] = [{scheme: []}]
    # The scheme stands for the header (and the cookie is the dashboard's, for browsers):
    # as parameters, clients would be asked for them twice.
    kept = [
        p
        for p in operation.get("parameters", [])
        if (p.get("in"), str(p.get("name", "")).lower()) not in _AUTH_PARAMS
    ]
    if kept:
        operation["parameters"] = kept
    else:
        operation.pop("parameters", None)


def document(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (FastAPI's document) with the bearer scheme and every error status."""
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    components.update(_error_schemas())
    scheme = _bearer_scheme(schema)
    for path, operations in schema.get("paths", {}).items():
        for operation in operations.values():
            _document_errors(path, operation)
            if _is_authenticated(operation):
                _require_bearer(operation, scheme)
    return schema


def install_openapi(app: FastAPI) -> None:
    """Serve `document(...)` of the app's schema at /openapi.json (and so in /docs)."""
    generate = app.openapi

    documented: list[dict[str, Any]] = []  # computed at the first request, then kept

    def openapi() -> dict[str, Any]:
        if not documented:
            documented.append(document(generate()))
        app.openapi_schema = documented[0]
        return documented[0]

    app.openapi = openapi  # type: ignore[method-assign]
