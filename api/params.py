"""Bounded integers of paths and queries: one place for the range each kind may take.

An id past what its SQL column holds is a 422 naming the parameter, never a database
error; a well-formed id that names nothing is a 404 (services raise NotFound).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query
from fastapi.exceptions import RequestValidationError

from services.db import MAX_SQL_INT
from services.jobs.store import decode_cursor


def shown(pattern: str) -> dict[str, str]:
    """`json_schema_extra` documenting the form of a parameter whose own check refuses
    anything else with a message that says what is wrong (a failed `pattern=` would only
    quote the expression)."""
    return {"pattern": pattern}


# Jobs, schedules and sweeps have SQL INTEGER keys (PostgreSQL int4); steps and the
# indexes of replicas and attempts are INTEGER columns as well.
MAX_ID = MAX_SQL_INT
MAX_INT = MAX_SQL_INT

DbId = Annotated[int, Path(ge=1, le=MAX_ID, description="an id this API returned", examples=[1])]
OptionalId = Annotated[int | None, Query(ge=1, le=MAX_ID)]
ReplicaIndex = Annotated[int | None, Query(ge=0, le=MAX_INT, description="0 is the chief")]
AttemptNumber = Annotated[int | None, Query(ge=1, le=MAX_INT, description="1 is the first")]
Step = Annotated[int | None, Query(ge=0, le=MAX_INT)]
# A bundle's sha256, as `sha256:<hex>` or `<hex>` (services/storage/keys.bundle_digest_hex).
Digest = Annotated[
    str,
    Path(json_schema_extra=shown(r"^(sha256:)?[0-9a-fA-F]{64}$"), examples=["sha256:" + "0" * 64]),
]
# A file of the project's data (checked by services/storage/keys.check_data_path, whose
# refusals say what is wrong: a pattern's would not).
_SEGMENT = (
    r"(?:[^./\\\x00-\x1f\x7f]|\.[^./\\\x00-\x1f\x7f]|\.\.[^/\\\x00-\x1f\x7f])"
    r"[^/\\\x00-\x1f\x7f]*"
)
DataPath = Annotated[
    str,
    Path(
        max_length=900,
        examples=["digits/train.csv"],
        json_schema_extra=shown(rf"^{_SEGMENT}(?:/{_SEGMENT})*$"),
        description=(
            "relative, segments neither empty nor `.`/`..` and at most 255 bytes, no backslash or "
            "control character"
        ),
    ),
]
# Text a query matches against SQL: PostgreSQL holds no NUL character in a string.
NO_NUL = r"^[^\x00]*$"
PageCursor = Annotated[
    str | None,
    Query(
        json_schema_extra=shown(r"^[0-9]{1,19}$"),
        description="the previous page's `next_cursor`; absent: start from the newest",
        examples=["120"],
    ),
]


def page_before(cursor: PageCursor = None) -> int | None:
    """The id a page of a newest-first list starts below (its `cursor`); a cursor no page
    returned is a 422 naming it. An empty one too: no page returns it."""
    if cursor is None:
        return None
    try:
        return decode_cursor(cursor)
    except ValueError as exc:
        raise RequestValidationError(
            [
                {
                    "loc": ("query", "cursor"),
                    "msg": f"{exc}; omit it to start from the newest",
                    "type": "value_error",
                }
            ]
        ) from exc


# A list route's `cursor` query parameter, decoded (page_before).
PageBefore = Annotated[int | None, Depends(page_before)]
