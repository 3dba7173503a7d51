"""Submit to first step, as the benchmarks of a job's start measure it (bench/containers.py,
bench/image_jobs.py): the same small 2-replica job, timed from its POST to the later
replica's first stored step."""

from __future__ import annotations

import time
from typing import Any

from cohort.client import Client
from services.statuses import TERMINAL_STATUSES

JOB: dict[str, Any] = {
    "name": "bench-first-step",
    "replicas": 2,
    "hyperparameters": {"epochs": 1, "steps_per_epoch": 20},
}


def first_step(client: Client, spec: dict[str, Any] = JOB) -> float:
    """Seconds from the POST of `spec` to the later replica's first stored step; the job
    must succeed."""
    posted = time.time()
    job = client.submit(spec)
    while client.job(job["id"])["status"] not in TERMINAL_STATUSES:
        time.sleep(0.25)
    done = client.job(job["id"])
    assert done["status"] == "succeeded", done["reason"]
    firsts = []
    for replica in range(2):
        points = client.metrics(job["id"], name=["loss"], replica=replica, limit=100_000)
        first = min(p["step"] for p in points)
        firsts.append(min(p["ts"] for p in points if p["step"] == first))
    return max(firsts) - posted
