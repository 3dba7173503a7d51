"""What the SDK raises: the API's error answers, carrying the API's own error body."""

from __future__ import annotations

from typing import Any


class ApiError(RuntimeError):
    """The API answered with an error status. `status` is the HTTP status, `body` the
    API's error body (`{"error", "message", "fields"}`; `fields` names each refused field
    of a 422 and the fix); the message is the API's own, plus, for a 401, which token was
    refused and how to fix it."""

    def __init__(self, status: int, body: Any, hint: str = "") -> None:
        message = body.get("message") if isinstance(body, dict) else str(body)
        super().__init__(f"HTTP {status}: {message}" + (f"; {hint}" if hint else ""))
        self.status = status
        self.body = body

    @property
    def fields(self) -> list[dict[str, Any]]:
        """The refused fields of a 422 ([] otherwise): `{"field": ..., "message": ...}`."""
        found = self.body.get("fields") if isinstance(self.body, dict) else None
        return list(found or [])


def unauthorized_hint(source: str) -> str:
    """What a 401 adds: which token was refused, and how to fix it."""
    fix = "run `cohort login` (or pass --token / set COHORT_TOKEN)"
    if not source:
        return f"no token was sent: {fix}"
    return f"the token from {source} was refused: {fix}"
