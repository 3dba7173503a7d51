"""JSON request bodies as Cohort reads them: finite numbers only.

Python's json module, which FastAPI parses bodies with, accepts `NaN`, `Infinity` and
`-Infinity` (and turns `1e999` into infinity), none of which is JSON; stored, they come
back as `null` or break a reader. Every route with a JSON body uses `CohortRoute`, which
parses the body once, refuses a non-finite number with a 422 naming where it is, and
hands the parsed body on (FastAPI reuses it, never parsing twice).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute


class JsonBodyRequest(Request):
    """A request whose JSON body nested past the parser's recursion limit, or not UTF-8,
    is a decode error (422), not an internal one (400)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = json.loads(body)
            except (RecursionError, UnicodeDecodeError) as exc:
                reason = "nested too deeply" if isinstance(exc, RecursionError) else "not UTF-8"
                raise json.JSONDecodeError(reason, body.decode("utf-8", "replace"), 0) from None
        return self._json


def first_non_finite(value: Any, path: tuple[str | int, ...] = ()) -> tuple[str | int, ...] | None:
    """Where the first NaN or infinity in a parsed JSON document is, or None."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, path)]
    while stack:  # a loop, not recursion: the body's depth is the sender's choice
        item, where = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where
        if isinstance(item, dict):
            stack.extend((v, (*where, k)) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend((v, (*where, i)) for i, v in reversed(list(enumerate(item))))
    return None


def _is_json(request: Request) -> bool:
    content_type = request.headers.get("content-type", "")
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class CohortRoute(APIRoute):
    """An API route whose JSON body holds only finite numbers (422 otherwise)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def checked(request: Request) -> Response:
            request = JsonBodyRequest(request.scope, request.receive)
            if _is_json(request) and await request.body():
                try:
                    body = await request.json()
                except ValueError:
                    body = None  # FastAPI parses again and answers its 422 (json_invalid)
                where = first_non_finite(body)
                if where is not None:
                    raise RequestValidationError(
                        [
                            {
                                "loc": ("body", *where),
                                "type": "finite_number",
                                "msg": "not a finite number: NaN and Infinity are not JSON; give a "
                                "number",
                            }
                        ]
                    )
            return await handler(request)

        return checked
