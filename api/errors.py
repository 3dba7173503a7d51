"""Map domain errors and validation failures to JSON answers a person can act on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis
import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException
from starlette.routing import Match

from services.db import database_unreachable
from services.exceptions import (
    BeyondQuota,
    DataPathConflict,
    FieldError,
    Forbidden,
    IdempotencyConflict,
    InvalidArtifactPath,
    InvalidBundle,
    InvalidDataPath,
    InvalidEventId,
    InvalidJobSpec,
    InvalidRegistryRequest,
    InvalidTokenSpec,
    InvalidTransition,
    InvalidWebhook,
    NotFound,
    NotRegistrable,
    QuotaError,
    QuotaExceeded,
    ScheduleConflict,
    SelfRevocation,
    SweepEnded,
    TooLarge,
    TooManyRequests,
    Unauthorized,
    UnsatisfiableRange,
)
from services.field_suggestions import close_field
from services.statuses import TERMINAL_STATUSES

_HINTS = {
    "greater_than_equal": "use a larger value",
    "less_than_equal": "use a smaller value",
    "extra_forbidden": "remove this field (see GET /docs for the job schema)",
    "int_type": "give a whole number",
    "float_type": "give a number",
    "literal_error": "use one of the listed values",
    "missing": "add this field",
    "json_invalid": "send a JSON document (numbers finite: no NaN or Infinity)",
    "string_pattern_mismatch": "see its description in GET /docs (NUL characters, for one, "
    "are refused)",
}

# How long a client should wait before retrying when the database or Redis is down.
RETRY_AFTER_SECONDS = 5

# The error code of each HTTP status Cohort answers with (the `error` of the body).
CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    416: "range_not_satisfiable",
    422: "invalid_request",
    429: "too_many_requests",
    503: "unavailable",
}


def _field(loc: tuple[object, ...], kind: object = None) -> str:
    if kind == "json_invalid":  # loc is ("body", <character offset>)
        return "body"
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def _body_model(request: Request) -> Any:
    """What the matched route declares its JSON body as (None for a route without one)."""
    body_field = getattr(request.scope.get("route"), "body_field", None)
    return None if body_field is None else body_field.field_info.annotation


def _did_you_mean(error: Mapping[str, Any], body: Any) -> str | None:
    """For an unknown field of the body, the message naming the declared field closest to
    it at the same level (`replica` -> `replicas`, `roles.chef` -> `chief`), if any."""
    loc = tuple(error.get("loc", ()))
    if error.get("type") != "extra_forbidden" or loc[:1] != ("body",) or body is None:
        return None
    near = close_field(body, loc[1:])
    return None if near is None else f"unknown field `{loc[-1]}`: did you mean `{near}`?"


def _validation_payload(exc: RequestValidationError, body: Any = None) -> dict[str, object]:
    fields = []
    for error in exc.errors():
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        if error.get("type") == "json_invalid":
            message += f" ({error.get('ctx', {}).get('error', 'invalid')})"
        hint = _HINTS.get(str(error.get("type")))
        suggestion = _did_you_mean(error, body)
        fields.append(
            {
                "field": _field(tuple(error.get("loc", ())), error.get("type")),
                "message": suggestion or message + (f" ({hint})" if hint else ""),
            }
        )
    summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields)
    return {"error": "invalid_request", "message": summary, "fields": fields}


@dataclass(frozen=True)
class Answer:
    """How one domain error is answered: status, error code, any extra headers."""

    status: int
    code: str
    headers: dict[str, str] | None = None


# Error class -> its HTTP answer (a new mapping is one line); a subclass answers as its
# nearest listed base.
# The body is {"error": code, "message": str(exc)}, plus `fields` for a FieldError.
ANSWERS: dict[type[Exception], Answer] = {
    InvalidJobSpec: Answer(422, "invalid_request"),
    NotFound: Answer(404, "not_found"),
    InvalidTransition: Answer(409, "conflict"),
    IdempotencyConflict: Answer(409, "idempotency_conflict"),
    ScheduleConflict: Answer(409, "conflict"),
    Unauthorized: Answer(401, "unauthorized", {"WWW-Authenticate": "Bearer"}),
    Forbidden: Answer(403, "forbidden"),  # the message names the missing scope
    InvalidTokenSpec: Answer(422, "invalid_request"),
    InvalidEventId: Answer(422, "invalid_request"),  # a Last-Event-ID the stream never sent
    TooLarge: Answer(413, "too_large"),  # a bundle or a data file past its limit
    InvalidBundle: Answer(422, "invalid_request"),
    InvalidArtifactPath: Answer(422, "invalid_request"),
    UnsatisfiableRange: Answer(416, "range_not_satisfiable"),  # with Content-Range (below)
    InvalidDataPath: Answer(422, "invalid_request"),
    InvalidWebhook: Answer(422, "invalid_request"),  # a URL refused (SSRF)
    DataPathConflict: Answer(409, "conflict"),
    SweepEnded: Answer(409, "conflict"),
    SelfRevocation: Answer(409, "conflict"),
    InvalidRegistryRequest: Answer(422, "invalid_request"),
    NotRegistrable: Answer(409, "conflict"),  # a job not succeeded, or without a model
    # Quotas (services/jobs/quotas.py): a count reached is worth retrying later (429); a
    # job its project may never run as it is (priority, gang size) is not (403).
    QuotaExceeded: Answer(429, "quota_exceeded"),
    BeyondQuota: Answer(403, "quota_exceeded"),
    TooManyRequests: Answer(429, "too_many_requests"),  # with Retry-After (below)
}


def _message(exc: Exception) -> str:
    if isinstance(exc, InvalidTransition) and exc.current in TERMINAL_STATUSES:
        return f"{exc}: the job has already finished"
    return str(exc)


def answer(exc: Exception) -> JSONResponse:
    """The JSON answer to a domain error listed in ANSWERS."""
    spec = next(ANSWERS[cls] for cls in type(exc).__mro__ if cls in ANSWERS)
    body: dict[str, object] = {"error": spec.code, "message": _message(exc)}
    if isinstance(exc, FieldError):
        body["fields"] = [{"field": exc.field, "message": exc.message}]
    headers = dict(spec.headers or {})
    if isinstance(exc, QuotaError):
        body.update(quota=exc.quota, used=exc.used, allowed=exc.allowed)
    if isinstance(exc, TooManyRequests):
        headers["Retry-After"] = str(exc.retry_after)
    if isinstance(exc, UnsatisfiableRange):  # RFC 9110 15.5.17: the file's whole length
        headers["Content-Range"] = f"bytes */{exc.size}"
    return JSONResponse(status_code=spec.status, content=body, headers=headers or None)


async def _answer(_: Request, exc: Exception) -> JSONResponse:
    return answer(exc)


def _allowed_methods(request: Request) -> str:
    """Every method some route takes at this path (Starlette's 405 names only the first
    route that matched the path)."""
    methods: set[str] = set()
    for route in iter_route_contexts(request.app.routes):  # the included routers' too
        match, _ = route.matches(request.scope)
        if match != Match.NONE:
            methods |= route.methods or set()
    return ", ".join(sorted(methods))


def _http_message(request: Request, exc: HTTPException) -> str:
    if exc.status_code == 404 and exc.detail == "Not Found":
        return f"no such path: {request.url.path} (see GET /docs for the API)"
    if exc.status_code == 405:
        return f"{request.method} is not allowed here; use {_allowed_methods(request)}"
    return str(exc.detail)


def error_response(
    status: int, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """Cohort's error body for an HTTP status that no domain error stands behind."""
    return JSONResponse(
        status_code=status,
        headers=headers or None,
        content={"error": CODES.get(status, "error"), "message": message},
    )


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    """Starlette's and FastAPI's own errors (no route, wrong method, body too large) in
    Cohort's body."""
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = _allowed_methods(request)
    return error_response(exc.status_code, _http_message(request, exc), headers)


def _unavailable(what: str) -> JSONResponse:
    return JSONResponse(
        status_code=503,
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        content={
            "error": "unavailable",
            "message": f"{what} is not answering; retry in {RETRY_AFTER_SECONDS} s",
        },
    )


async def _database_error(_: Request, exc: Exception) -> JSONResponse:
    # A database that cannot be reached (services.db.database_unreachable) is worth a
    # retry: 503. Any other database error is a bug: re-raised, a 500 with its traceback.
    if database_unreachable(exc):
        return _unavailable("the database")
    raise exc


async def _redis_down(_: Request, __: Exception) -> JSONResponse:
    return _unavailable("Redis")


def install_error_handlers(app: FastAPI) -> None:
    """Answer validation failures, HTTP errors, an unreachable database or Redis, and
    every domain error in ANSWERS; nothing else turns errors into HTTP."""

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content=_validation_payload(exc, _body_model(request)))

    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]
    # DBAPIError: every error the driver raised (OperationalError, InterfaceError, a
    # statement cut off by a restart); TimeoutError: the pool's, not the driver's.
    app.add_exception_handler(sqlalchemy.exc.DBAPIError, _database_error)
    app.add_exception_handler(sqlalchemy.exc.TimeoutError, _database_error)
    app.add_exception_handler(redis.ConnectionError, _redis_down)
    app.add_exception_handler(redis.TimeoutError, _redis_down)

    for exc_class in ANSWERS:
        app.add_exception_handler(exc_class, _answer)
