"""End to end: champion against challenger on one holdout (a schedule's `evaluate:`), on
the real stack (PostgreSQL, Redis, scheduler, agent) with real TensorFlow replicas.

The built-in trainer's `evaluate(ctx)` loads each saved model and scores it on a holdout
of the digits table; the command form runs a script given COHORT_MODEL_DIR and
COHORT_HOLDOUT_DIR, which hold the model's and the holdout's files read-only (the stack's
agent, as root, runs each job as its own uid). Jobs are one-replica `one_device`
runs of a few steps.
"""

from __future__ import annotations

import datetime as dt
import gzip
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.e2e.conftest import job_story, wait_for, wait_terminal
from tests.e2e.test_dashboard import log_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow(240)]

GOOD = {
    "trainer": "mlp_digits",
    "strategy": "one_device",
    "replicas": 1,
    "hyperparameters": {"epochs": 3, "steps_per_epoch": 20},
}
# Made worse on purpose: one step at a learning rate too small to move.
BAD = {**GOOD, "hyperparameters": {"epochs": 1, "steps_per_epoch": 1, "learning_rate": 1e-5}}


def digits_rows() -> list[str]:
    """The digits table's rows ("64 pixels,label"), from scikit-learn's bundled copy."""
    spec = importlib.util.find_spec("sklearn")
    assert spec is not None and spec.origin is not None
    table = Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"
    return gzip.decompress(table.read_bytes()).decode().splitlines()


def api(client: Client, method: str, path: str, **kwargs: Any) -> Any:
    response = client.http.request(method, f"/api/v1/schedules{path}", **kwargs)
    assert response.status_code < 400, response.text
    return response.json() if response.status_code != 204 else None


def put_holdout(client: Client, tmp_path: Path, lines: list[str], name: str) -> None:
    source = tmp_path / name
    source.write_text("\n".join(lines) + "\n")
    client.upload_data("holdout/part-0.csv", source)


def run_and_decide(
    client: Client, schedule_id: int, template: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Trigger a run (with `template` as the schedule's job) and wait for its decision."""
    if template is not None:
        api(client, "PATCH", f"/{schedule_id}", json={"job": template})
    run = api(client, "POST", f"/{schedule_id}/trigger")
    job = wait_terminal(client, run["job_id"], timeout=300)
    assert job["status"] == "succeeded", job_story(client, run["job_id"])

    def decided() -> dict[str, Any] | None:
        runs = api(client, "GET", f"/{schedule_id}")["recent_runs"]
        mine = next(r for r in runs if r["job_id"] == run["job_id"])
        return mine if mine["decision"] != "pending" else None

    def story() -> str:
        runs = api(client, "GET", f"/{schedule_id}")["recent_runs"]
        mine = next(r for r in runs if r["job_id"] == run["job_id"])
        return "\n".join(job_story(client, e["job_id"]) for e in mine["evaluations"] if e["job_id"])

    return wait_for(decided, 300, f"a decision on job {run['job_id']}", 0.5, story)


def between(start: str, end: str) -> float:
    return (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()


def test_the_alias_holder_is_judged_on_the_same_holdout(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    _stack, client = module_stack
    rows = digits_rows()
    put_holdout(client, tmp_path, rows[:400], "first.csv")
    schedule = api(
        client,
        "POST",
        "",
        json={
            "name": "judged",
            "cron": "0 0 1 1 *",
            "job": GOOD,
            "evaluate": {"data": "data/holdout", "metric": "accuracy", "mode": "max"},
        },
    )
    sid = schedule["id"]

    first = run_and_decide(client, sid)
    assert first["decision"] == "promoted", first
    (ev1,) = first["evaluations"]
    assert ev1["model_job_id"] == first["job_id"] and ev1["status"] == "succeeded"
    assert ev1["value"] == first["metric_value"] > 0.5
    job = client.job(ev1["job_id"])  # visible like any job, named for what it evaluates
    assert job["name"] == f"evaluate-job{first['job_id']}-judged"
    assert (job["strategy"], job["replicas"], job["status"]) == ("one_device", 1, "succeeded")

    second = run_and_decide(client, sid, BAD)
    assert second["decision"] == "kept", second
    (ev2,) = second["evaluations"]  # the holder was judged on this digest already
    assert ev2["holdout_digest"] == ev1["holdout_digest"]
    assert ev2["value"] < ev1["value"], (ev1, ev2)

    # New holdout content: the holder is evaluated again, on the same digest as the new one.
    put_holdout(client, tmp_path, rows[400:800], "second.csv")
    third = run_and_decide(client, sid, GOOD)
    assert third["decision"] in {"promoted", "kept"}, third
    mine, holder = third["evaluations"]
    assert (mine["model_job_id"], holder["model_job_id"]) == (third["job_id"], first["job_id"])
    assert mine["holdout_digest"] == holder["holdout_digest"] != ev1["holdout_digest"]
    took = between(client.job(third["job_id"])["finished_at"], third["decided_at"])
    ran = [client.job(e["job_id"]) for e in third["evaluations"]]
    each = ", ".join(f"{between(j['started_at'], j['finished_at']):.1f}" for j in ran)
    print(f"\nsuccess -> decision with two evaluation jobs: {took:.1f} s (each ran {each} s)")  # noqa: T201
    promoted = api(client, "GET", f"/{sid}")["promoted_job_id"]

    # A holdout the evaluation cannot read: evaluation_failed, and the holder stays.
    put_holdout(client, tmp_path, ["1,2,3"], "broken.csv")
    fourth = run_and_decide(client, sid, GOOD)
    assert fourth["decision"] == "evaluation_failed", fourth
    assert "failed" in fourth["decision_reason"]
    assert api(client, "GET", f"/{sid}")["promoted_job_id"] == promoted
    api(client, "DELETE", f"/{sid}")


TRAIN = """
import json, os
from pathlib import Path
quality = float(os.environ["QUALITY"])
Path(os.environ["COHORT_MODEL_DIR"], "weights.json").write_text(json.dumps({"q": quality}))
"""
EVALUATE = """
import json, os
from pathlib import Path
from cohort.metrics import report
model, holdout = Path(os.environ["COHORT_MODEL_DIR"]), Path(os.environ["COHORT_HOLDOUT_DIR"])
rows = len((holdout / "part-0.csv").read_text().splitlines())
quality = json.loads((model / "weights.json").read_text())["q"]
writable = 0
for target in (model / "weights.json", model / "new.txt", holdout / "new.txt"):
    try:
        with open(target, "a") as handle:
            handle.write("x")
        writable += 1
    except OSError:
        pass
report(0, accuracy=quality, rows=rows, writable=writable)
"""


def scripted(quality: str) -> dict[str, Any]:
    """A command job whose "model" is the quality it is given."""
    return {
        "command": ["python", "-c", TRAIN],
        "env": {"QUALITY": quality},
        "strategy": "one_device",
        "replicas": 1,
    }


def scripted_schedule(client: Client, tmp_path: Path, name: str) -> dict[str, Any]:
    put_holdout(client, tmp_path, ["a", "b", "c"], "rows.csv")
    return api(
        client,
        "POST",
        "",
        json={
            "name": name,
            "cron": "0 0 1 1 *",
            "job": scripted("0.7"),
            "evaluate": {
                "data": "data/holdout",
                "metric": "accuracy",
                "command": ["python", "-c", EVALUATE],
            },
        },
    )


def test_a_command_job_evaluates_with_its_own_script(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = module_stack
    schedule = scripted_schedule(client, tmp_path, "scripted")
    first = run_and_decide(client, schedule["id"])
    assert first["decision"] == "promoted" and first["metric_value"] == 0.7, first
    evaluation_job = first["evaluations"][0]["job_id"]
    rows = client.metrics(evaluation_job, name="rows")
    assert rows and rows[-1].value == 3  # it read the holdout
    if os.geteuid() == 0:  # the model and the holdout are the agent's, read-only to the job
        assert [p.value for p in client.metrics(evaluation_job, name="writable")] == [0]
    second = run_and_decide(client, schedule["id"], scripted("0.6"))
    assert second["decision"] == "kept" and second["metric_value"] == 0.6, second
    third = run_and_decide(client, schedule["id"], scripted("0.9"))
    assert third["decision"] == "promoted", third
    assert api(client, "GET", f"/{schedule['id']}")["promoted_job_id"] == third["job_id"]
    env = {**os.environ, "COHORT_URL": stack.url, "COHORT_TOKEN": stack.token, "COLUMNS": "250"}
    shown = subprocess.run(
        [sys.executable, "-m", "cli", "schedule", "show", str(schedule["id"])],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert "evaluated on data/holdout by python -c" in shown, shown
    assert f"job {third['job_id']}: accuracy=0.9 (evaluation job" in shown, shown
    api(client, "DELETE", f"/{schedule['id']}")


def test_the_dashboard_shows_a_runs_evaluations(
    module_stack: tuple[Stack, Client], tmp_path: Path, browser: Any
) -> None:
    stack, client = module_stack
    schedule = scripted_schedule(client, tmp_path, "on-the-page")
    run = run_and_decide(client, schedule["id"])
    (evaluation,) = run["evaluations"]
    context = browser.new_context(base_url=stack.url)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    log_in(page, stack.token)
    page.goto("/schedules")
    page.wait_for_selector("#schedules:not([aria-busy])")
    cell = page.locator("td[data-label=Evaluations] li").first.inner_text()
    assert f"model #{run['job_id']} accuracy=0.7000 on data/holdout" in cell, cell
    assert f"by #{evaluation['job_id']}" in cell, cell
    context.close()
    assert not errors, errors
    api(client, "DELETE", f"/{schedule['id']}")
