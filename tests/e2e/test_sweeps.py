"""End to end: sweeps on the real stack (PostgreSQL, Redis, scheduler, agent, TensorFlow).

Trials are one-replica `one_device` runs of a few steps on the agent's 2 slots.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cli.stack import Stack
from cohort.client import Client
from services.statuses import TERMINAL_STATUSES
from tests.e2e.conftest import wait_for
from tests.e2e.stepper import stepping_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow(85)]

SWEEP_YAML = """\
name: lr-width
template:
  trainer: mlp_digits
  strategy: one_device
  replicas: 1
  hyperparameters: {epochs: 1, steps_per_epoch: 8}
space:
  grid:
    learning_rate: [0.05, 0.0005]
    hidden_units: [16, 32]
max_concurrent: 2
objective: {metric: eval_accuracy, mode: max}
"""


def sweep_api(client: Client, method: str, path: str = "", **kwargs: Any) -> Any:
    response = client.http.request(method, f"/api/v1/sweeps{path}", **kwargs)
    assert response.status_code < 400, response.text
    return response.json()


def wait_ended(client: Client, sweep_id: int, timeout: float = 420) -> dict[str, Any]:
    def ended() -> dict[str, Any] | None:
        sweep = sweep_api(client, "GET", f"/{sweep_id}")
        return sweep if sweep["status"] != "running" else None

    return wait_for(ended, timeout, f"sweep {sweep_id} to end", interval=1.0)


def parse(moment: str) -> dt.datetime:
    return dt.datetime.fromisoformat(moment.replace("Z", "+00:00"))


def most_at_once(intervals: list[tuple[dt.datetime, dt.datetime]]) -> int:
    """The most intervals that overlap at one instant (an end before a start at a tie)."""
    edges = sorted(
        [(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals],
        key=lambda e: (e[0], e[1]),
    )
    current = peak = 0
    for _, delta in edges:
        current += delta
        peak = max(peak, current)
    return peak


def intervals_from_events(
    client: Client, job_ids: list[int], begin: set[str]
) -> list[tuple[dt.datetime, dt.datetime]]:
    """Per job, from its first event into a status of `begin` to its terminal event."""
    spans = []
    for job_id in job_ids:
        events = client.events(job_id)
        start = next(parse(e["created_at"]) for e in events if e["to_status"] in begin)
        end = next(parse(e["created_at"]) for e in events if e["to_status"] in TERMINAL_STATUSES)
        spans.append((start, end))
    return spans


def last_value(client: Client, job_id: int, name: str) -> float:
    points = client.metrics(job_id, name=[name], replica=0)
    return max(points, key=lambda p: p["step"])["value"]


def test_a_grid_sweep_runs_every_trial_two_at_a_time_and_finds_the_best(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = module_stack
    spec = tmp_path / "sweep.yaml"
    spec.write_text(SWEEP_YAML)
    env = {**os.environ, "COHORT_URL": stack.url, "COHORT_TOKEN": stack.token}
    created = subprocess.run(
        [sys.executable, "-m", "cli", "sweep", "create", str(spec), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    sweep_id = next(s["id"] for s in sweep_api(client, "GET")["items"])

    sweep = wait_ended(client, sweep_id)
    assert sweep["status"] == "succeeded", sweep["reason"]
    trials = sweep["trials"]
    assert [t["status"] for t in trials] == ["succeeded"] * 4
    assert sorted(
        (t["parameters"]["learning_rate"], t["parameters"]["hidden_units"]) for t in trials
    ) == [(0.0005, 16), (0.0005, 32), (0.05, 16), (0.05, 32)]
    jobs = [client.job(t["job_id"]) for t in trials]
    for job, trial in zip(jobs, trials, strict=True):
        assert job["sweep_id"] == sweep_id and job["trial_index"] == trial["index"]
        assert job["hyperparameters"]["learning_rate"] == trial["parameters"]["learning_rate"]
        assert job["hyperparameters"]["hidden_units"] == trial["parameters"]["hidden_units"]
        assert job["hyperparameters"]["steps_per_epoch"] == 8

    # Never more than max_concurrent trials at once, from the stored event log: neither
    # unfinished (submitted .. ended) nor holding slots (scheduled .. ended).
    ids = [t["job_id"] for t in trials]
    assert most_at_once(intervals_from_events(client, ids, {"queued"})) <= 2
    assert most_at_once(intervals_from_events(client, ids, {"scheduled", "running"})) == 2

    # The best is the trial with the best objective, by the metrics the trainer stored.
    values = {t["job_id"]: last_value(client, t["job_id"], "eval_accuracy") for t in trials}
    assert {t["job_id"]: t["objective_value"] for t in trials} == values
    best = max(values, key=lambda job_id: values[job_id])
    assert sweep["best_job_id"] == best and sweep["best_value"] == values[best]
    assert sweep["best_parameters"] == next(t["parameters"] for t in trials if t["job_id"] == best)

    shown = subprocess.run(
        [sys.executable, "-m", "cli", "sweep", "show", str(sweep_id)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0 and "succeeded" in shown.stdout, shown.stderr


def test_median_rule_stops_a_bad_trial_early(module_stack: tuple[Stack, Client]) -> None:
    _, client = module_stack
    # Steppers (tests/e2e/stepper.py) whose accuracy climbs at their learning rate: the
    # rule is under test, not what TensorFlow learns. 15 s a trial, far longer than the
    # rule takes to judge the bad one (from step 20) and its stop to arrive.
    steps = 300
    sweep = sweep_api(
        client,
        "POST",
        json={
            "name": "median",
            "template": stepping_job(steps, 0.05, strategy="one_device", replicas=1),
            # Two good trials run first (max_concurrent 2); the third barely learns.
            # GridSampler runs a grid of three values in the order 2, 1, 0 (the same for
            # every such grid): the bad one last, judged against the two finished ones.
            "space": {"grid": {"learning_rate": [1e-7, 0.04, 0.05]}},
            "max_concurrent": 2,
            "objective": {"metric": "accuracy", "mode": "max", "value": "best"},
            "early_stopping": {"rule": "median", "min_steps": 20, "min_trials": 2},
        },
    )
    sweep = wait_ended(client, sweep["id"])
    assert sweep["status"] == "succeeded", sweep["reason"]
    good, also_good, bad = sweep["trials"]
    assert bad["parameters"] == {"learning_rate": 1e-7}, sweep["trials"]
    assert good["status"] == also_good["status"] == "succeeded"
    assert bad["status"] == "cancelled" and bad["stopped_early"], bad
    assert bad["reason"].startswith("stopped early: median rule at step"), bad["reason"]
    judged_at = int(bad["reason"].split(" at step ")[1].split()[0])
    assert 20 <= judged_at < steps
    # It did not run to its end: its steps stop short, and its log has no last line.
    assert max(p["step"] for p in client.metrics(bad["job_id"], name=["accuracy"])) < steps
    assert not [
        line for line in client.logs(bad["job_id"]) if line["line"] == f"step {steps} of {steps}"
    ]
    assert sweep["best_job_id"] in (good["job_id"], also_good["job_id"])
    assert "1 stopped early" in sweep["reason"]


def test_cancelling_a_sweep_cancels_its_running_trials(
    module_stack: tuple[Stack, Client],
) -> None:
    _, client = module_stack
    sweep = sweep_api(
        client,
        "POST",
        json={
            "name": "long",
            "template": {
                "trainer": "mlp_digits",
                "strategy": "one_device",
                "replicas": 1,
                "hyperparameters": {"epochs": 1000, "steps_per_epoch": 50},
            },
            "space": {
                "random": {
                    "learning_rate": {"distribution": "log_uniform", "low": 1e-3, "high": 0.1}
                },
                "seed": 3,
            },
            "trials": 6,
            "max_concurrent": 2,
            "objective": {"metric": "accuracy", "mode": "max"},
        },
    )

    def two_running() -> list[dict[str, Any]] | None:
        trials = sweep_api(client, "GET", f"/{sweep['id']}")["trials"]
        running = [t for t in trials if t["status"] == "running"]
        return trials if len(running) == 2 else None

    trials = wait_for(two_running, 240, "two trials running", interval=1.0)
    cancelled = sweep_api(client, "POST", f"/{sweep['id']}/cancel")
    assert cancelled["status"] == "cancelled"

    def all_stopped() -> list[dict[str, Any]] | None:
        jobs = [client.job(t["job_id"]) for t in trials]
        done = all(
            j["status"] == "cancelled"
            and j["replica_list"]
            and j["replica_list"][0]["status"] == "stopped"
            for j in jobs
        )
        return jobs if done else None

    wait_for(all_stopped, 120, "the trials' replicas to stop", interval=1.0)
    after = sweep_api(client, "GET", f"/{sweep['id']}")
    assert after["trials_created"] == 2 and after["status"] == "cancelled"
