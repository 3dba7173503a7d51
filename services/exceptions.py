"""Domain errors raised by services; api/errors.py maps them to HTTP answers."""

from __future__ import annotations


class CohortError(Exception):
    """Base class of every domain error."""


class NotFound(CohortError):
    """An object does not exist (or belongs to another project)."""

    def __init__(self, kind: str, ident: object) -> None:
        super().__init__(f"{kind} {ident} not found")
        self.kind = kind
        self.ident = ident


class JobNotFound(NotFound):
    def __init__(self, job_id: int) -> None:
        super().__init__("job", job_id)


class InvalidTransition(CohortError):
    """A status change that the transition table does not allow."""

    def __init__(self, job_id: int, current: str, target: str) -> None:
        super().__init__(f"job {job_id} cannot go from {current} to {target}")
        self.job_id = job_id
        self.current = current
        self.target = target


class FieldError(CohortError):
    """An error about one field of a request: the api names the field and the fix."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class InvalidJobSpec(FieldError):
    """A job spec that passed schema validation but is refused by a setting."""


class IdempotencyConflict(CohortError):
    """An Idempotency-Key reused with a different job spec."""


class Unauthorized(CohortError):
    """No token, or a token that does not exist."""


class ScheduleNotFound(NotFound):
    def __init__(self, schedule_id: int | str) -> None:
        super().__init__("schedule", schedule_id)


class ScheduleConflict(FieldError):
    """A schedule request that clashes with stored state (a duplicate name)."""


class NoPromotedModel(NotFound):
    """A schedule whose runs have not promoted a model yet."""

    def __init__(self, schedule_id: int) -> None:
        super().__init__("promoted model of schedule", schedule_id)
        self.args = (f"schedule {schedule_id} has no promoted model yet: it needs `promote` set "
                     "and a run that succeeded with the chosen metric",)


class InvalidEventId(FieldError):
    """A stream's resume point (`Last-Event-ID`) that is not an event id of that stream."""
