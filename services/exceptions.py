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


class NodeNotFound(NotFound):
    def __init__(self, node_id: str) -> None:
        super().__init__("node", repr(node_id))


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

    def renamed(self, field: str, message: str | None = None) -> FieldError:
        """The same error (same class, so the same answer) about another field."""
        # Not copy.copy: that calls __init__ again with `args`, which subclasses take
        # otherwise.
        moved = type(self).__new__(type(self))
        moved.__dict__.update(self.__dict__)
        moved.field, moved.message = field, self.message if message is None else message
        moved.args = (f"{moved.field}: {moved.message}",)
        return moved

    def under(self, prefix: str) -> FieldError:
        """The same error about a field nested under `prefix` (e.g. a schedule's `job.`)."""
        return self.renamed(prefix + self.field)


class InvalidJobSpec(FieldError):
    """A job spec that passed schema validation but is refused by a setting."""


class IdempotencyConflict(CohortError):
    """An Idempotency-Key reused with a different job spec."""


class Unauthorized(CohortError):
    """No token, or one that does not exist, has expired or was revoked (401)."""


class Forbidden(CohortError):
    """A token without the scope the request needs (403)."""

    def __init__(self, message: str, scope: str) -> None:
        super().__init__(message)
        self.scope = scope


class TokenNotFound(NotFound):
    def __init__(self, token_id: int) -> None:
        super().__init__("token", token_id)


class SelfRevocation(CohortError):
    """A token asked to revoke itself (409): another admin token must do it."""


class InvalidTokenSpec(FieldError):
    """A token request that passed schema validation but cannot be issued (422)."""


class WeakBootstrapToken(CohortError):
    """A COHORT_BOOTSTRAP_TOKEN too short to be an admin's secret (the api refuses to start)."""


class ScheduleNotFound(NotFound):
    def __init__(self, schedule_id: int | str) -> None:
        super().__init__("schedule", schedule_id)


class ScheduleConflict(FieldError):
    """A schedule request that clashes with stored state (a duplicate name)."""


class NoPromotedModel(NotFound):
    """A schedule whose runs have not promoted a model yet."""

    def __init__(self, schedule_id: int) -> None:
        super().__init__("promoted model of schedule", schedule_id)
        self.args = (
            f"schedule {schedule_id} has no promoted model yet: it needs `promote` set "
            "and a run that succeeded with the chosen metric",
        )


class InvalidEventId(FieldError):
    """A stream's resume point (`Last-Event-ID`) that is not an event id of that stream."""


class BundleNotFound(NotFound):
    """A job naming a code bundle its project has not uploaded (404)."""

    def __init__(self, digest: str) -> None:
        super().__init__("bundle", digest)
        self.args = (
            f"bundle {digest} not found in this project: upload it with "
            "`cohort job submit JOB.yaml --code DIR` or `cohort bundle push DIR` "
            f"(PUT /api/v1/bundles/{digest})",
        )


class TooLarge(CohortError):
    """An upload past its size limit (413)."""


class BundleTooLarge(TooLarge):
    """An upload past COHORT_MAX_BUNDLE_BYTES (413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the bundle is over the limit of {limit / 2**20:.0f} MiB "
            f"({limit} bytes, COHORT_MAX_BUNDLE_BYTES): add large files to "
            ".cohortignore and read data from the artifact store instead"
        )
        self.limit = limit


class InvalidBundle(FieldError):
    """An upload refused for what it holds: a digest that does not match, a hostile or
    unreadable archive (422)."""


class ArtifactNotFound(NotFound):
    """No artifact at that path of the job (404)."""

    def __init__(self, job_id: int, path: str) -> None:
        super().__init__("artifact", path)
        self.args = (
            f"job {job_id} has no artifact {path!r}; GET "
            f"/api/v1/jobs/{job_id}/artifacts lists them",
        )


class InvalidArtifactPath(FieldError):
    """A download path that is absolute or climbs out of the job's artifacts (422)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__("path", f"{path!r}: {message}")
        self.path = path


class UnsatisfiableRange(CohortError):
    """A download's Range that starts past the end of the file (416)."""

    def __init__(self, header: str, size: int) -> None:
        super().__init__(
            f"Range {header!r} starts past the end of the file ({size} bytes): ask for "
            f"bytes=N- with N below {size}, or leave Range out for the whole file"
        )
        self.size = size


class DataNotFound(NotFound):
    """No file at that path of the project's data (404): named by a job's `inputs`, or
    asked for by a delete."""

    def __init__(self, path: str) -> None:
        super().__init__("data", path)
        self.args = (
            f"data {path!r} not found in this project: upload it with "
            f"`cohort data push FILE {path}` (PUT /api/v1/data/{path}); "
            "`cohort data list` lists what the project has",
        )


class DataTooLarge(TooLarge):
    """A data upload past COHORT_MAX_DATA_BYTES (413)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the file is over the limit of {limit / 2**20:.0f} MiB ({limit} "
            "bytes, COHORT_MAX_DATA_BYTES): split it into several files"
        )
        self.limit = limit


class InvalidDataPath(FieldError):
    """A data path that could leave the project's data, or no file could have (422)."""


class DataPathConflict(FieldError):
    """A data path that is a directory of other data, or lies under a file (409)."""


class SweepNotFound(NotFound):
    def __init__(self, sweep_id: int) -> None:
        super().__init__("sweep", sweep_id)


class SweepEnded(CohortError):
    """A change asked of a sweep that has already ended."""

    def __init__(self, sweep_id: int, status: str) -> None:
        super().__init__(f"sweep {sweep_id} has already ended ({status})")


class ProjectNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__("project", name)


class QuotaError(FieldError):
    """A refusal by a project's quota: which limit (`quota`), what the project uses or
    the request asks (`used`), and what the quota allows (`allowed`)."""

    def __init__(self, field: str, message: str, *, quota: str, used: int, allowed: int) -> None:
        super().__init__(field, message)
        self.quota = quota
        self.used = used
        self.allowed = allowed


class QuotaExceeded(QuotaError):
    """A count the project's quota caps is reached: its queued jobs, its schedules (429).
    Retrying later can succeed, once some of them have gone."""


class BeyondQuota(QuotaError, InvalidJobSpec):
    """A job the project's quota never permits as it is: a priority above the project's
    ceiling, a gang larger than its running-replica or GPU quota (403)."""


class TooManyRequests(CohortError):
    """A caller over a rate or concurrency limit (429); `retry_after`: seconds to wait."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class InvalidWebhook(FieldError):
    """A webhook the cluster will not send to (its URL refused: server-side request
    forgery, services/webhooks/targets.py)."""


class WebhookNotFound(NotFound):
    def __init__(self, webhook_id: int) -> None:
        super().__init__("webhook", webhook_id)


class ModelNotFound(NotFound):
    """No such model, version or alias in the caller's project (404)."""

    def __init__(self, what: str) -> None:
        super().__init__("model", what)
        self.args = (f"{what} not found; GET /api/v1/models lists the project's models",)


class InvalidRegistryRequest(FieldError):
    """A registry request refused for a name or number (422)."""


class NotRegistrable(FieldError):
    """A job whose model cannot be registered as it is: not succeeded, no model (409)."""
