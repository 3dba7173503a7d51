"""MLflow's own client (`mlflow-skinny`), imported here only and only when an export runs:
the api, agents and replicas never load it (a second and 1,300 modules).

MLflow's HTTP client retries a failed request 7 times over minutes by default, and
prints each run's URL when it ends; the exporter does its own retrying (the run waits and
is tried again later: services/tracking/exporter.py) and runs in the scheduler. So,
unless the operator set them: no retries, 10 s a request, no URL printed, and no usage
data sent to MLflow's makers from the control plane. Credentials come the way MLflow
reads them (MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME/PASSWORD, DATABRICKS_*).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

# MLflow's own limits for one log_batch (mlflow/utils/validation.py).
METRICS_PER_BATCH = 1000
PARAMS_TAGS_PER_BATCH = 100

CLIENT_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
}

# (key, value, timestamp in ms, step): one point as MLflow takes it.
MetricPoint = tuple[str, float, int, int]


class TrackingError(Exception):
    """A call to MLflow failed. `server_down`: the server did not answer, or answered that
    it cannot now (5xx, 429), so every run on it waits; otherwise this run's call was
    refused (a deleted run, a value it will not take) and only this run waits."""

    def __init__(self, message: str, *, server_down: bool) -> None:
        super().__init__(message)
        self.server_down = server_down


def _mlflow() -> Any:
    for name, value in CLIENT_DEFAULTS.items():
        os.environ.setdefault(name, value)
    import mlflow.tracking

    return mlflow.tracking


@contextmanager
def _calls(uri: str) -> Iterator[None]:
    """MLflow's errors as TrackingError, saying which server and whether it is down."""
    from mlflow.exceptions import MlflowException, RestException

    try:
        yield
    except RestException as exc:  # the server answered with an error
        status = int(exc.get_http_status_code())  # type: ignore[no-untyped-call]
        down = status >= 500 or status == 429
        raise TrackingError(f"{uri}: {str(exc)[:500]}", server_down=down) from exc
    except MlflowException as exc:  # no answer: refused, reset, timed out
        raise TrackingError(f"{uri} unreachable: {str(exc)[:500]}", server_down=True) from exc
    except OSError as exc:
        raise TrackingError(f"{uri} unreachable: {exc}", server_down=True) from exc


class RunWriter:
    """Runs on one MLflow server: experiments found or made, runs made once, their params,
    tags and points written in MLflow's largest batches, their ends."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.client = _mlflow().MlflowClient(tracking_uri=uri)
        self.experiments: dict[str, str] = {}

    def experiment_id(self, name: str) -> str:
        """The id of experiment `name`, made if missing (by whoever comes first)."""
        if name not in self.experiments:
            with _calls(self.uri):
                found = self.client.get_experiment_by_name(name)
                if found is None:
                    try:
                        self.experiments[name] = self.client.create_experiment(name)
                    except Exception:  # made meanwhile by another client: read it again
                        found = self.client.get_experiment_by_name(name)
                        if found is None:
                            raise
                if found is not None:
                    self.experiments[name] = found.experiment_id
        return self.experiments[name]

    def open_run(
        self,
        experiment_id: str,
        *,
        export_key: str,
        name: str,
        start_ms: int,
        tags: Mapping[str, str],
    ) -> str:
        """The id of the run tagged `export_key`, created (with `tags`) if there is none:
        a run made just before a crash, its id never committed, is found, not made twice."""
        with _calls(self.uri):
            found = self.client.search_runs(
                [experiment_id],
                filter_string=f"tags.`cohort.export_key` = '{export_key}'",
                max_results=1,
            )
            if found:
                return str(found[0].info.run_id)
            run = self.client.create_run(
                experiment_id,
                start_time=start_ms,
                tags={**tags, "cohort.export_key": export_key},
                run_name=name,
            )
            return str(run.info.run_id)

    def log(
        self,
        run_id: str,
        *,
        metrics: Sequence[MetricPoint] = (),
        params: Mapping[str, str] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        """Write points, params and tags, as few `log_batch` calls as MLflow's limits allow
        (1,000 points, 100 params and 100 tags a call); in order, so what failed and what
        follows it are left for the next try."""
        from mlflow.entities import Metric, Param, RunTag

        items = [Param(k, v) for k, v in (params or {}).items()]
        labels = [RunTag(k, v) for k, v in (tags or {}).items()]
        with _calls(self.uri):
            for start in range(0, max(len(items), len(labels)), PARAMS_TAGS_PER_BATCH):
                end = start + PARAMS_TAGS_PER_BATCH
                self.client.log_batch(run_id, params=items[start:end], tags=labels[start:end])
            for start in range(0, len(metrics), METRICS_PER_BATCH):
                batch = metrics[start : start + METRICS_PER_BATCH]
                self.client.log_batch(
                    run_id, metrics=[Metric(k, v, ts, step) for k, v, ts, step in batch]
                )

    def end(self, run_id: str, *, status: str, end_ms: int) -> None:
        """End the run: FINISHED, FAILED or KILLED, at the job's end."""
        with _calls(self.uri):
            self.client.set_terminated(run_id, status=status, end_time=end_ms)
