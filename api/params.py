"""Bounded integers of paths and queries: one place for the range each kind may take.

An id past what its SQL column holds is a 422 naming the parameter, never a database
error; a well-formed id that names nothing is a 404 (services raise NotFound).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from services.db import MAX_SQL_INT

# Jobs, schedules and sweeps have SQL INTEGER keys (PostgreSQL int4); steps and the
# indexes of replicas and attempts are INTEGER columns as well.
MAX_ID = MAX_SQL_INT
MAX_INT = MAX_SQL_INT

DbId = Annotated[int, Path(ge=1, le=MAX_ID, description="an id this API returned",
                           examples=[1])]
OptionalId = Annotated[int | None, Query(ge=1, le=MAX_ID)]
ReplicaIndex = Annotated[int | None, Query(ge=0, le=MAX_INT, description="0 is the chief")]
AttemptNumber = Annotated[int | None, Query(ge=1, le=MAX_INT, description="1 is the first")]
Step = Annotated[int | None, Query(ge=0, le=MAX_INT)]
