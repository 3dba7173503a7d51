"""Cohort from Python: `report()` inside a replica, and the SDK outside it.

    from cohort import report                  # in a training script (standard library only)
    report(step, loss=loss, accuracy=accuracy)

    from cohort import Client                  # anywhere: submit, follow, download
    job = Client().submit("job.yaml", code="./src").wait()

`import cohort` and `report` load the standard library alone: they run inside the user's
training process, next to their TensorFlow. The SDK's names (Client, AsyncClient, Job,
ApiError, ...) are imported on first use, with httpx and pydantic.

    metrics.py      report(): one JSON line per call in $COHORT_METRICS_FILE
    report_queue.py report()'s lines written off the training thread
    client.py       Client: the REST API, typed answers, retries after Retry-After
    async_client.py AsyncClient: the same calls, awaited
    registry.py     the model registry's calls on Client, and `NAME:VERSION` / `NAME@ALIAS`
    webhooks.py     a project's webhooks' calls on Client (admins)
    calls.py        every REST call the SDK makes, declared once for both clients
    transport.py    what both clients share about HTTP: settings, retries, errors
    jobs.py         Job and AsyncJob: a job with refresh, wait, follow, download, cancel
    events.py       a job's stream as typed events (status, metric, log)
    api_models.py   the API's shapes, generated from its OpenAPI document
    model_base.py   the base of those models (also readable as the JSON mapping)
    errors.py       ApiError: the API's error status and body
    config.py       where a client connects and with which token when not told
    specs.py        a spec given as a dict, a model or a YAML/JSON file
    bundles.py      packing a code directory into a bundle (.cohortignore honoured)
    uploads.py      an upload's body, in chunks counted for a progress bar
    sse.py          a Server-Sent Events reader (standard library only)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cohort.metrics import report

if TYPE_CHECKING:
    from cohort.async_client import AsyncClient
    from cohort.client import Client
    from cohort.errors import ApiError
    from cohort.events import LogEvent, MetricEvent, StatusEvent
    from cohort.jobs import AsyncJob, Job, JobTimeout

__all__ = [
    "ApiError",
    "AsyncClient",
    "AsyncJob",
    "Client",
    "Job",
    "JobTimeout",
    "LogEvent",
    "MetricEvent",
    "StatusEvent",
    "report",
]

_LAZY = {
    "Client": "cohort.client",
    "AsyncClient": "cohort.async_client",
    "ApiError": "cohort.errors",
    "Job": "cohort.jobs",
    "AsyncJob": "cohort.jobs",
    "JobTimeout": "cohort.jobs",
    "StatusEvent": "cohort.events",
    "MetricEvent": "cohort.events",
    "LogEvent": "cohort.events",
}


def __getattr__(name: str) -> Any:
    """The SDK's names, imported when first asked for (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cohort' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
