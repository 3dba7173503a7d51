"""Map domain errors and validation failures to JSON answers a person can act on."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from services.exceptions import (
    DataPathConflict,
    FieldError,
    IdempotencyConflict,
    InvalidArtifactPath,
    InvalidBundle,
    InvalidDataPath,
    InvalidEventId,
    InvalidJobSpec,
    InvalidTransition,
    NotFound,
    ScheduleConflict,
    SweepEnded,
    TooLarge,
    TooManyRequests,
    Unauthorized,
)
from services.statuses import TERMINAL_STATUSES

_HINTS = {
    "greater_than_equal": "use a larger value",
    "less_than_equal": "use a smaller value",
    "extra_forbidden": "remove this field (see GET /docs for the job schema)",
    "int_type": "give a whole number",
    "float_type": "give a number",
    "literal_error": "use one of the listed values",
    "missing": "add this field",
}


def _field(loc: tuple[object, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def _validation_payload(exc: RequestValidationError) -> dict[str, object]:
    fields = []
    for error in exc.errors():
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        hint = _HINTS.get(str(error.get("type")))
        fields.append({"field": _field(tuple(error.get("loc", ()))),
                       "message": message + (f" ({hint})" if hint else "")})
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
    InvalidEventId: Answer(422, "invalid_request"),  # a Last-Event-ID the stream never sent
    TooLarge: Answer(413, "too_large"),  # a bundle or a data file past its limit
    InvalidBundle: Answer(422, "invalid_request"),
    InvalidArtifactPath: Answer(422, "invalid_request"),
    InvalidDataPath: Answer(422, "invalid_request"),
    DataPathConflict: Answer(409, "conflict"),
    SweepEnded: Answer(409, "conflict"),
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
    if isinstance(exc, TooManyRequests):
        headers["Retry-After"] = str(exc.retry_after)
    return JSONResponse(status_code=spec.status, content=body, headers=headers or None)


async def _answer(_: Request, exc: Exception) -> JSONResponse:
    return answer(exc)


def install_error_handlers(app: FastAPI) -> None:
    """Answer validation failures and every domain error in ANSWERS; nothing else turns
    errors into HTTP."""

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content=_validation_payload(exc))

    for exc_class in ANSWERS:
        app.add_exception_handler(exc_class, _answer)
