"""End to end: cron schedules on the real stack (PostgreSQL, Redis, scheduler, agent, TensorFlow).

Jobs are one-replica `one_device` runs of a few steps, to spare the machine's two cores.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from cli.stack import Stack
from cohort.client import Client
from services.statuses import TERMINAL_STATUSES
from tests.e2e.conftest import wait_for, wait_terminal
from tests.e2e.stepper import stepping_job

pytestmark = [pytest.mark.e2e, pytest.mark.slow(95)]

TINY = {
    "trainer": "mlp_digits",
    "strategy": "one_device",
    "replicas": 1,
    "hyperparameters": {"epochs": 1, "steps_per_epoch": 5},
}
# Until it is replaced: a stepper (tests/e2e/stepper.py), which waits without a core's load.
LONG = stepping_job(1_000_000, 0.01, strategy="one_device", replicas=1)


def api(client: Client, method: str, path: str, **kwargs: Any) -> Any:
    response = client.http.request(method, f"/api/v1/schedules{path}", **kwargs)
    assert response.status_code < 400, response.text
    return response.json() if response.status_code != 204 else None


def scheduled_jobs(client: Client, schedule_id: int) -> list[dict[str, Any]]:
    return client.jobs(schedule_id=schedule_id, limit=500)["items"][::-1]  # oldest first


def parse(moment: str) -> dt.datetime:
    return dt.datetime.fromisoformat(moment.replace("Z", "+00:00"))


def test_a_schedule_every_5s_spawns_real_jobs(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = module_stack
    spec = tmp_path / "schedule.yaml"
    spec.write_text(
        "name: every5\ncron: '*/5 * * * * *'\ntimezone: Europe/Berlin\n"
        "concurrency_policy: forbid\njob:\n  trainer: mlp_digits\n  strategy: one_device\n"
        "  replicas: 1\n  hyperparameters: {epochs: 1, steps_per_epoch: 5}\n"
    )
    env = {**os.environ, "COHORT_URL": stack.url, "COHORT_TOKEN": stack.token}
    created = subprocess.run(
        [sys.executable, "-m", "cli", "schedules", "create", str(spec), "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    schedule = next(s for s in api(client, "GET", "")["items"] if s["name"] == "every5")

    def two_succeeded() -> list[dict[str, Any]] | None:
        done = [j for j in scheduled_jobs(client, schedule["id"]) if j["status"] == "succeeded"]
        return done if len(done) >= 2 else None

    done = wait_for(two_succeeded, 300, "two scheduled jobs to succeed", interval=1.0)
    jobs = scheduled_jobs(client, schedule["id"])
    times = [parse(j["scheduled_for"]) for j in jobs]
    assert len(set(times)) == len(times)  # one job per fire time
    assert all(t.second % 5 == 0 and t.microsecond == 0 for t in times), times
    for job in jobs:
        assert job["name"] == f"every5-{parse(job['scheduled_for']):%Y%m%d-%H%M%S}"
    assert all(j["replica_list"][0]["exit_code"] == 0 for j in done)

    shown = api(client, "GET", f"/{schedule['id']}", params={"runs": 100})
    outcomes = {r["outcome"] for r in shown["recent_runs"]}
    assert "fired" in outcomes
    assert parse(shown["next_fire_at"]) > parse(shown["recent_runs"][0]["scheduled_for"])
    # forbid: fire times that came while a job ran are recorded as skipped, not queued.
    assert len([j for j in jobs if j["status"] not in TERMINAL_STATUSES]) <= 1

    # Paused: nothing fires for two periods; resumed: it fires again.
    api(client, "POST", f"/{schedule['id']}/pause")
    wait_for(
        lambda: all(
            j["status"] in TERMINAL_STATUSES for j in scheduled_jobs(client, schedule["id"])
        ),
        180,
        "the last job to end",
        interval=1.0,
    )
    count = len(scheduled_jobs(client, schedule["id"]))
    deadline = time.monotonic() + 11
    while time.monotonic() < deadline:
        assert len(scheduled_jobs(client, schedule["id"])) == count, "fired while paused"
        time.sleep(1.0)
    api(client, "POST", f"/{schedule['id']}/resume")
    wait_for(
        lambda: len(scheduled_jobs(client, schedule["id"])) > count,
        30,
        "a fire after resume",
        interval=0.5,
    )
    api(client, "POST", f"/{schedule['id']}/pause")
    for job in scheduled_jobs(client, schedule["id"]):  # the module's next test shares the stack
        if job["status"] not in TERMINAL_STATUSES:
            client.cancel(job["id"])


def test_promotion_keeps_the_better_model(module_stack: tuple[Stack, Client]) -> None:
    stack, client = module_stack
    good = {**TINY, "hyperparameters": {"epochs": 3, "steps_per_epoch": 20}}
    bad = {**TINY, "hyperparameters": {"epochs": 1, "steps_per_epoch": 1, "learning_rate": 0.00001}}
    schedule = api(
        client,
        "POST",
        "",
        json={
            "name": "promoted",
            "cron": "0 0 1 1 *",
            "job": good,
            "promote": {"metric": "eval_accuracy", "mode": "max"},
        },
    )

    def run_and_decide(template: dict[str, Any]) -> dict[str, Any]:
        api(client, "PATCH", f"/{schedule['id']}", json={"job": template})
        run = api(client, "POST", f"/{schedule['id']}/trigger")
        assert run["outcome"] == "triggered"
        wait_terminal(client, run["job_id"], timeout=300)

        def decided() -> dict[str, Any] | None:
            runs = api(client, "GET", f"/{schedule['id']}")["recent_runs"]
            mine = next(r for r in runs if r["job_id"] == run["job_id"])
            return mine if mine["decision"] != "pending" else None

        return wait_for(decided, 120, f"a decision on job {run['job_id']}", interval=0.5)

    first = run_and_decide(good)
    assert first["decision"] == "promoted", first
    second = run_and_decide(bad)
    assert second["decision"] == "kept", second
    assert second["metric_value"] < first["metric_value"]

    model = api(client, "GET", f"/{schedule['id']}/model")
    assert model["job_id"] == first["job_id"]
    assert model["value"] == first["metric_value"] and model["node_id"] == "e2e-node"
    assert (stack.settings.data_dir / model["path"]).is_dir()
    # Both runs are versions of the schedule's model; `production` moved to the first only.
    assert (model["model"], model["alias"], model["version"]) == ("promoted", "production", 1)
    registry = client.model("promoted")
    assert [(v.version, v.job_id) for v in registry.versions] == [
        (2, second["job_id"]),
        (1, first["job_id"]),
    ]
    assert registry.versions[1].lineage.schedule_name == "promoted"
    moves = client.alias_history("promoted", "production").items
    assert [(m.from_version, m.to_version) for m in moves] == [(None, 1)]
    assert moves[0].moved_by == f"schedule promoted (id {schedule['id']})"


def test_forbid_then_replace_with_a_long_running_job(
    module_stack: tuple[Stack, Client],
) -> None:
    _, client = module_stack
    schedule = api(
        client,
        "POST",
        "",
        json={"name": "long", "cron": "*/5 * * * * *", "job": LONG, "concurrency_policy": "forbid"},
    )
    sid = schedule["id"]
    first = wait_for(
        lambda: next((j for j in scheduled_jobs(client, sid) if j["status"] == "running"), None),
        120,
        "a running job",
    )

    def skipped() -> dict[str, Any] | None:
        runs = api(client, "GET", f"/{sid}")["recent_runs"]
        return next((r for r in runs if r["outcome"] == "skipped"), None)

    run = wait_for(skipped, 60, "a fire time skipped under forbid", interval=0.5)
    assert f"job {first['id']} " in run["reason"]
    assert [j["id"] for j in scheduled_jobs(client, sid)] == [first["id"]]

    api(client, "PATCH", f"/{sid}", json={"concurrency_policy": "replace"})
    replaced = wait_terminal(client, first["id"], timeout=60)
    assert replaced["status"] == "cancelled" and "replaced by job" in replaced["reason"]
    wait_for(
        lambda: client.job(first["id"])["replica_list"][0]["status"] == "stopped",
        60,
        "the replaced job's replica to be stopped",
    )
    api(client, "POST", f"/{sid}/pause")
    jobs = scheduled_jobs(client, sid)
    assert len(jobs) >= 2 and jobs[1]["id"] > first["id"]
    for job in jobs:
        if job["status"] not in TERMINAL_STATUSES:
            client.cancel(job["id"])


def _leader(stack: Stack) -> tuple[str, subprocess.Popen[bytes]]:
    for name, process in stack.children:
        log = stack.log_dir / f"{name}.log"
        if (
            name.startswith("scheduler")
            and log.exists()
            and "scheduler is the leader" in log.read_text()
        ):
            return name, process
    raise AssertionError("no scheduler leads")


def test_two_schedulers_fire_one_job_per_fire_time(pg_stack: tuple[Stack, Client]) -> None:
    stack, client = pg_stack
    stack._spawn("scheduler-2", [sys.executable, "-m", "cli", "scheduler"])
    # A GPU job on a CPU-only node waits in the queue: firing is exercised, not TensorFlow.
    waiting = {**TINY, "gpus_per_replica": 1}
    schedule = api(
        client, "POST", "", json={"name": "race", "cron": "*/3 * * * * *", "job": waiting}
    )
    sid = schedule["id"]
    wait_for(lambda: len(scheduled_jobs(client, sid)) >= 3, 60, "three fires")
    name, leader = _leader(stack)
    os.killpg(leader.pid, signal.SIGKILL)  # the new leader takes over after the lock's TTL
    before = len(scheduled_jobs(client, sid))
    wait_for(
        lambda: len(scheduled_jobs(client, sid)) >= before + 3,
        90,
        f"three fires after {name} was killed",
    )
    api(client, "POST", f"/{sid}/pause")

    jobs = scheduled_jobs(client, sid)
    times = [parse(j["scheduled_for"]) for j in jobs]
    assert len(times) == len(set(times)), "a fire time fired twice"
    assert all(t.second % 3 == 0 for t in times)
    runs = api(client, "GET", f"/{sid}", params={"runs": 500})["recent_runs"]
    fired = [r for r in runs if r["outcome"] == "fired"]
    assert sorted(r["job_id"] for r in fired) == sorted(j["id"] for j in jobs)
    # The handover gap: older fire times recorded as missed, the latest one run late.
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    if max(gaps) > dt.timedelta(seconds=3):
        assert any(r["outcome"] == "missed" for r in runs), runs
    for job in jobs:
        client.cancel(job["id"])
