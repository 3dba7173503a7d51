"""The REST calls the SDK makes, each declared once: its method, path, parameters and the
typed model of its answer. Client (cohort/client.py) and AsyncClient
(cohort/async_client.py) only send them, so the two never differ in what they ask.

No HTTP here: a Call is data; `answer()` turns a response body into the Call's model.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from pydantic import TypeAdapter

from cohort import api_models as m
from cohort.uploads import RangeCut

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request, and how its JSON answer becomes a T."""

    method: str
    path: str
    answer: Callable[[Any], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float | None = None
    # Safe to send again after a 503 (a GET, or a POST made idempotent by its key); a 429
    # is always safe (the request was refused, not run).
    repeatable: bool = True


_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def _adapter(shape: Any) -> TypeAdapter[Any]:
    """The shape's adapter, built once: building one costs far more than the parse it does."""
    found = _ADAPTERS.get(shape)
    if found is None:
        found = _ADAPTERS[shape] = TypeAdapter(shape)
    return found


def typed(model: type[T]) -> Callable[[Any], T]:
    adapter: TypeAdapter[T] = _adapter(model)
    return adapter.validate_python


def items(model: type[T]) -> Callable[[Any], list[T]]:
    """A list answer `{"items": [...]}` as a list of `model`."""
    adapter: TypeAdapter[list[T]] = _adapter(list[model])  # type: ignore[valid-type]
    return lambda body: adapter.validate_python(body["items"])


def _none(_body: Any) -> None:
    return None


def _params(**given: Any) -> dict[str, Any]:
    return {k: v for k, v in given.items() if v is not None}


# Jobs
def submit(spec: dict[str, Any], idempotency_key: str | None) -> Call[m.JobRead]:
    # Every submission carries a key: sent again after a dropped answer or a 503, it is
    # answered with the job it made, never a second job.
    key = idempotency_key or f"sdk-{uuid.uuid4()}"
    headers = {"Idempotency-Key": key}
    return Call("POST", "/api/v1/jobs", typed(m.JobRead), json=spec, headers=headers)


def validate(spec: dict[str, Any], bundle_pending: bool) -> Call[m.JobSpec]:
    params = {"bundle_pending": "true"} if bundle_pending else {}
    return Call("POST", "/api/v1/validate/job", typed(m.JobSpec), params=params, json=spec)


def job(job_id: int) -> Call[m.JobRead]:
    return Call("GET", f"/api/v1/jobs/{int(job_id)}", typed(m.JobRead))


def jobs(**filters: Any) -> Call[m.JobList]:
    return Call("GET", "/api/v1/jobs", typed(m.JobList), params=_params(**filters))


def cancel(job_id: int) -> Call[m.JobRead]:
    return Call("POST", f"/api/v1/jobs/{int(job_id)}/cancel", typed(m.JobRead), repeatable=False)


def events(job_id: int) -> Call[list[m.JobEventRead]]:
    return Call("GET", f"/api/v1/jobs/{int(job_id)}/events", typed(list[m.JobEventRead]))


def metrics(job_id: int, **filters: Any) -> Call[list[m.MetricPointRead]]:
    path = f"/api/v1/jobs/{int(job_id)}/metrics"
    return Call("GET", path, items(m.MetricPointRead), params=_params(**filters))


def logs(job_id: int, **filters: Any) -> Call[list[m.LogLineRead]]:
    path = f"/api/v1/jobs/{int(job_id)}/logs"
    return Call("GET", path, items(m.LogLineRead), params=_params(**filters))


def artifacts(job_id: int, under: str = "") -> Call[list[m.ArtifactRead]]:
    path = f"/api/v1/jobs/{int(job_id)}/artifacts"
    params = {"path": under} if under else {}
    return Call("GET", path, items(m.ArtifactRead), params=params, timeout=300.0)


@dataclass(frozen=True)
class Streamed:
    """A GET whose answer is read as it arrives (a download, an event stream): sent with
    transport.open_stream by either client."""

    path: str
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    connect_timeout: float = 30.0
    read_timeout: float = 300.0
    start: int = 0  # a ranged download's first byte; its end, excluded
    end: int | None = None

    def cut(self, status_code: int) -> RangeCut:
        """What to keep of each chunk of the answer (all of a whole file's)."""
        skip = self.start if self.start and status_code != 206 else 0
        return RangeCut(skip, self.start, self.end)


def download(job_id: int, path: str, start: int = 0, end: int | None = None) -> Streamed:
    ranged = start > 0 or end is not None
    last = "" if end is None else str(end - 1)
    return Streamed(
        f"/api/v1/jobs/{int(job_id)}/artifacts/download",
        params={"path": path},
        headers={"Range": f"bytes={start}-{last}"} if ranged else {},
        start=start,
        end=end,
    )


def job_stream(job_id: int, kinds: tuple[str, ...], last_event_id: str | None) -> Streamed:
    # A read timeout above the server's keep-alive comments: silence that long is a
    # dropped connection, resumed from `last_event_id`.
    headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
    path = f"/api/v1/jobs/{int(job_id)}/stream"
    params = {"kinds": list(kinds)}
    return Streamed(path, params, headers, connect_timeout=10.0, read_timeout=60.0)


def nodes() -> Call[list[m.NodeRead]]:
    return Call("GET", "/api/v1/nodes", typed(list[m.NodeRead]))


def drain_node(node_id: str, reason: str = "") -> Call[m.NodeRead]:
    path = f"/api/v1/nodes/{quote(node_id, safe='')}/drain"
    return Call("POST", path, typed(m.NodeRead), json={"reason": reason})  # idempotent


def undrain_node(node_id: str) -> Call[m.NodeRead]:
    path = f"/api/v1/nodes/{quote(node_id, safe='')}/undrain"
    return Call("POST", path, typed(m.NodeRead))  # idempotent


# Sweeps
def create_sweep(spec: dict[str, Any]) -> Call[m.SweepRead]:
    return Call("POST", "/api/v1/sweeps", typed(m.SweepRead), json=spec, repeatable=False)


def sweep(sweep_id: int) -> Call[m.SweepRead]:
    return Call("GET", f"/api/v1/sweeps/{int(sweep_id)}", typed(m.SweepRead))


def sweeps(**filters: Any) -> Call[m.SweepList]:
    return Call("GET", "/api/v1/sweeps", typed(m.SweepList), params=_params(**filters))


def cancel_sweep(sweep_id: int) -> Call[m.SweepRead]:
    path = f"/api/v1/sweeps/{int(sweep_id)}/cancel"
    return Call("POST", path, typed(m.SweepRead), repeatable=False)


# Schedules
def create_schedule(spec: dict[str, Any]) -> Call[m.ScheduleRead]:
    return Call("POST", "/api/v1/schedules", typed(m.ScheduleRead), json=spec, repeatable=False)


def schedule(schedule_id: int) -> Call[m.ScheduleRead]:
    return Call("GET", f"/api/v1/schedules/{int(schedule_id)}", typed(m.ScheduleRead))


def schedules() -> Call[list[m.ScheduleRead]]:
    return Call("GET", "/api/v1/schedules", items(m.ScheduleRead))


def update_schedule(schedule_id: int, changes: dict[str, Any]) -> Call[m.ScheduleRead]:
    path = f"/api/v1/schedules/{int(schedule_id)}"
    return Call("PATCH", path, typed(m.ScheduleRead), json=changes, repeatable=False)


def schedule_action(schedule_id: int, action: str) -> Call[m.ScheduleRead]:
    """`pause` or `resume`."""
    path = f"/api/v1/schedules/{int(schedule_id)}/{action}"
    return Call("POST", path, typed(m.ScheduleRead), repeatable=False)


def trigger_schedule(schedule_id: int) -> Call[m.ScheduleRunRead]:
    path = f"/api/v1/schedules/{int(schedule_id)}/trigger"
    return Call("POST", path, typed(m.ScheduleRunRead), repeatable=False)


def delete_schedule(schedule_id: int) -> Call[None]:
    return Call("DELETE", f"/api/v1/schedules/{int(schedule_id)}", _none, repeatable=False)


def promoted_model(schedule_id: int) -> Call[m.PromotedModel]:
    return Call("GET", f"/api/v1/schedules/{int(schedule_id)}/model", typed(m.PromotedModel))


# Data
def data() -> Call[list[m.DataRead]]:
    return Call("GET", "/api/v1/data", items(m.DataRead), timeout=300.0)


def delete_data(path: str) -> Call[None]:
    return Call("DELETE", f"/api/v1/data/{quote(path)}", _none)


def whoami() -> Call[m.TokenRead]:
    return Call("GET", "/api/v1/whoami", typed(m.TokenRead))


# Webhooks (admin tokens)
def create_webhook(url: str, events: list[str], note: str) -> Call[m.WebhookCreated]:
    body = {"url": url, "events": events, "note": note}
    return Call("POST", "/api/v1/webhooks", typed(m.WebhookCreated), json=body, repeatable=False)


def webhooks() -> Call[list[m.WebhookRead]]:
    return Call("GET", "/api/v1/webhooks", items(m.WebhookRead))


def delete_webhook(webhook_id: int) -> Call[None]:
    return Call("DELETE", f"/api/v1/webhooks/{int(webhook_id)}", _none, repeatable=False)


def ping_webhook(webhook_id: int) -> Call[m.DeliveryRead]:
    path = f"/api/v1/webhooks/{int(webhook_id)}/ping"
    return Call("POST", path, typed(m.DeliveryRead), repeatable=False)


def webhook_deliveries(webhook_id: int, limit: int) -> Call[list[m.DeliveryRead]]:
    path = f"/api/v1/webhooks/{int(webhook_id)}/deliveries"
    return Call("GET", path, items(m.DeliveryRead), params={"limit": limit})


# The model registry
def _model_path(name: str) -> str:
    return f"/api/v1/models/{quote(name, safe='')}"


def models() -> Call[list[m.ModelSummary]]:
    return Call("GET", "/api/v1/models", items(m.ModelSummary))


def model(name: str) -> Call[m.ModelRead]:
    return Call("GET", _model_path(name), typed(m.ModelRead))


def model_version(name: str, version: int) -> Call[m.VersionRead]:
    return Call("GET", f"{_model_path(name)}/versions/{int(version)}", typed(m.VersionRead))


def register_version(name: str, job_id: int) -> Call[m.VersionRead]:
    path = f"{_model_path(name)}/versions"
    body = {"job_id": int(job_id)}
    return Call("POST", path, typed(m.VersionRead), json=body, repeatable=False)


def model_alias(name: str, alias: str) -> Call[m.AliasRead]:
    return Call("GET", f"{_model_path(name)}/aliases/{quote(alias, safe='')}", typed(m.AliasRead))


def move_alias(name: str, alias: str, version: int, reason: str) -> Call[m.AliasRead]:
    # Repeatable: the same move sent again points the alias where it already points (one
    # more line in its history, saying the same).
    path = f"{_model_path(name)}/aliases/{quote(alias, safe='')}"
    body = {"version": int(version), "reason": reason}
    return Call("PUT", path, typed(m.AliasRead), json=body)


def alias_history(name: str, alias: str) -> Call[m.AliasHistory]:
    path = f"{_model_path(name)}/aliases/{quote(alias, safe='')}/history"
    return Call("GET", path, typed(m.AliasHistory))


def version_files(name: str, version: int) -> Call[list[m.ArtifactRead]]:
    path = f"{_model_path(name)}/versions/{int(version)}/files"
    return Call("GET", path, items(m.ArtifactRead), timeout=300.0)


def version_download(name: str, version: int, path: str = "") -> Streamed:
    """A version's file, or all of it (`path` empty) as a .tar.gz."""
    route = f"{_model_path(name)}/versions/{int(version)}/files/download"
    return Streamed(route, params={"path": path})
