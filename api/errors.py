"""Map domain errors and validation failures to JSON answers a person can act on."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from services.exceptions import (
    IdempotencyConflict,
    InvalidEventId,
    InvalidJobSpec,
    InvalidTransition,
    NotFound,
    ScheduleConflict,
    Unauthorized,
)

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


def _error(status: int, code: str, message: str, **extra: object) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": code, "message": message, **extra})


def install_error_handlers(app: FastAPI) -> None:
    """Register one handler per domain error; nothing else turns errors into HTTP."""

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=422, content=_validation_payload(exc))

    @app.exception_handler(InvalidJobSpec)
    async def _spec(_: Request, exc: InvalidJobSpec) -> JSONResponse:
        return _error(422, "invalid_request", str(exc),
                      fields=[{"field": exc.field, "message": exc.message}])

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound) -> JSONResponse:
        return _error(404, "not_found", str(exc))

    @app.exception_handler(InvalidTransition)
    async def _transition(_: Request, exc: InvalidTransition) -> JSONResponse:
        return _error(409, "conflict", f"{exc}: the job has already finished"
                      if exc.current in ("succeeded", "failed", "cancelled") else str(exc))

    @app.exception_handler(IdempotencyConflict)
    async def _idempotency(_: Request, exc: IdempotencyConflict) -> JSONResponse:
        return _error(409, "idempotency_conflict", str(exc))

    @app.exception_handler(ScheduleConflict)
    async def _schedule_conflict(_: Request, exc: ScheduleConflict) -> JSONResponse:
        return _error(409, "conflict", str(exc),
                      fields=[{"field": exc.field, "message": exc.message}])

    @app.exception_handler(Unauthorized)
    async def _unauthorized(_: Request, exc: Unauthorized) -> JSONResponse:
        return JSONResponse(status_code=401, content={"error": "unauthorized",
                                                      "message": str(exc)},
                            headers={"WWW-Authenticate": "Bearer"})

    # Live streams: a resume point the stream never sent, refused before it starts.
    @app.exception_handler(InvalidEventId)
    async def _event_id(_: Request, exc: InvalidEventId) -> JSONResponse:
        return _error(422, "invalid_request", str(exc),
                      fields=[{"field": exc.field, "message": exc.message}])
