"""Prometheus `/metrics`: the service's own figures, from SQL at scrape time."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient


def test_prometheus_metrics(
    pg_url: str,  # noqa: ARG001
    committed: Any,  # noqa: ARG001
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from api.main import create_app
    from services.settings import get_settings

    committed(project="prom")
    monkeypatch.setenv("COHORT_METRICS_TOKEN", "prometheus-scrape-token")
    get_settings.cache_clear()
    try:
        body = TestClient(create_app()).get(
            "/metrics", headers={"Authorization": "Bearer prometheus-scrape-token"}
        )
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert body.status_code == 200 and body.headers["content-type"].startswith("text/plain")
    text = body.text
    queued = next(
        line for line in text.splitlines() if line.startswith('cohort_jobs{status="queued"}')
    )
    assert float(queued.split()[-1]) >= 1
    for name in (
        "cohort_queue_depth",
        "cohort_job_wait_seconds_bucket",
        'cohort_ingested_rows_total{kind="metric"}',
    ):
        assert name in text
