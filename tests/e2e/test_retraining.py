"""End to end, the whole of scheduled retraining as examples/retraining/ sets it up, on the
real stack (PostgreSQL, Redis, api, scheduler, agent), TensorFlow replicas, the installed
CLI and a real HTTP receiver of the project's webhooks:

pushes of new training data each start one run (`trigger:`); each run's model is
evaluated with the holder's on one holdout (`evaluate:`) and becomes a version of
`digits`; `production` moves only to a better model, so a run trained on shuffled labels
does not move it; `cohort model alias ... --version 1` rolls it back and
`cohort model download digits@production` brings version 1's files, which load; the
receiver gets every event once per id, signed, and what it missed while down after it
comes back.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.stack import Stack
from cohort.client import Client
from tests.conftest import reachable_dir
from tests.e2e.conftest import free_port, job_story, pg_stack_with, wait_for
from tests.e2e.test_webhooks import ENV as WEBHOOK_ENV
from tests.services.test_webhook_delivery import documented_verify
from tests.webhook_receiver import Receiver

pytestmark = [pytest.mark.e2e, pytest.mark.slow(200)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "retraining"
COHORT = str(Path(sys.executable).parent / "cohort")  # the installed console script
EVENTS = ["schedule.fired", "model.version_registered", "model.alias_moved"]
SETTLE = 2
SCORE = """
import sys, numpy as np, tensorflow as tf
model = tf.keras.models.load_model(sys.argv[1])
rows = np.loadtxt(sys.argv[2], delimiter=",", ndmin=2)
predicted = np.argmax(model.predict(rows[:, :-1] / 16.0, verbose=0), axis=1)
print(float(np.mean(predicted == rows[:, -1])))
"""


@pytest.fixture(scope="module")
def stack(replicas_tmp_root: Path) -> Iterator[tuple[Stack, Client]]:
    data_dir = reachable_dir(replicas_tmp_root, "retraining-")
    env = {**WEBHOOK_ENV, "COHORT_REDIS_URL": "", "COHORT_EMBEDDED_REDIS_PORT": str(free_port())}
    with pg_stack_with(data_dir, env) as running:
        yield running


def cohort(stack: Stack, *argv: str) -> str:
    """A command as a user's shell runs it (the installed `cohort`); its output."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("COHORT_")}
    env |= {"COHORT_URL": stack.url, "COHORT_TOKEN": stack.token, "COLUMNS": "250"}
    done = subprocess.run(
        [COHORT, *argv], env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def make_data(tmp_path: Path, name: str, rows: str, *flags: str) -> Path:
    out = tmp_path / name
    subprocess.run(
        [sys.executable, str(EXAMPLE / "make_data.py"), str(out), rows, *flags], check=True
    )
    return out


def decided_runs(client: Client, schedule_id: int, count: int) -> list[dict[str, Any]]:
    """The schedule's first `count` runs (oldest first), once each has its decision."""

    def done() -> list[dict[str, Any]] | None:
        runs = client.schedule(schedule_id).to_dict()["recent_runs"][::-1]
        runs = [r for r in runs if r["job_id"] is not None]
        if len(runs) >= count and all(r["decision"] != "pending" for r in runs[:count]):
            return runs[:count]
        return None

    def story() -> str:
        runs = client.schedule(schedule_id).to_dict()["recent_runs"]
        return "\n".join(job_story(client, r["job_id"]) for r in runs if r["job_id"])

    return wait_for(done, SETTLE + 300, f"{count} decided runs", 1.0, story)


def digests(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_pushes_retrain_judge_register_promote_roll_back_and_notify(
    stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    running, client = stack
    receiver = Receiver().up()
    hook = client.create_webhook(receiver.url, EVENTS)
    cohort(running, "data", "push", str(make_data(tmp_path, "holdout.csv", "1500:1797")),
           "digits/holdout.csv")  # fmt: skip
    spec = yaml.safe_load((EXAMPLE / "schedule.yaml").read_text())
    spec["trigger"]["settle_seconds"] = SETTLE
    (tmp_path / "schedule.yaml").write_text(yaml.safe_dump(spec))
    cohort(running, "schedule", "create", str(tmp_path / "schedule.yaml"), "--code", str(EXAMPLE))
    schedule = next(s for s in client.schedules() if s.name == "digits-retrain")

    # A first training set, then one with its labels shuffled (worse on purpose), then more
    # data: each push a run, judged on the holdout, each run a version of `digits`.
    pushes = [("0:400",), ("0:1400", "--bad-labels"), ("0:1400",)]
    for count, args in enumerate(pushes, start=1):
        train = make_data(tmp_path, f"train-{count}.csv", *args)
        cohort(running, "data", "push", str(train), "digits/train.csv")
        runs = decided_runs(client, schedule.id, count)
    assert [r["decision"] for r in runs] == ["promoted", "kept", "promoted"], runs
    assert len({r["data_version"] for r in runs}) == 3  # one run per pushed content
    for run in runs:  # the run was told which content it trains on
        logs = " ".join(line.line for line in client.logs(run["job_id"]))
        assert f"training on {run['data_version']}" in logs, logs
    good, bad, better = (r["evaluations"][0] for r in runs)
    assert bad["value"] < good["value"] < better["value"], runs
    assert good["holdout_digest"] == bad["holdout_digest"] == better["holdout_digest"]

    model = client.model("digits")
    assert [(v.version, v.job_id) for v in model.versions][::-1] == [
        (n, r["job_id"]) for n, r in enumerate(runs, start=1)
    ]
    assert [(a.name, a.version) for a in model.aliases] == [("production", 3)]
    moves = client.alias_history("digits", "production").items
    assert [(m.from_version, m.to_version) for m in moves] == [(1, 3), (None, 1)]

    # The receiver is down for the rollback; the event reaches it once it is back.
    receiver.down()
    cohort(running, "model", "alias", "digits", "production", "--version", "1",
           "--reason", "version 3 misreads sevens")  # fmt: skip
    time.sleep(2)
    receiver.up()
    out = tmp_path / "served"
    cohort(running, "model", "download", "digits@production", "-o", str(out))
    assert digests(out) == {f.path: f.sha256 for f in client.version_files("digits:1")}
    # Loads as a user of tf-keras loads it, and scores on the holdout as its evaluation did.
    loaded = subprocess.run(
        [sys.executable, "-c", SCORE, str(out), str(tmp_path / "holdout.csv")],
        env={**os.environ, "TF_USE_LEGACY_KERAS": "1"},
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert abs(float(loaded.stdout.split()[-1]) - good["value"]) < 1e-6, (loaded.stdout, good)
    v1 = client.model_version("digits:1")  # the version shows its evaluation on the holdout
    assert [(e.value, e.holdout_digest) for e in v1.evaluations] == [
        (good["value"], good["holdout_digest"])
    ]

    def all_events() -> list[Any] | None:
        got = receiver.bodies()
        moved = [g for g in got if g.json["event"] == "model.alias_moved"]
        return got if len(moved) >= 3 else None

    wait_for(all_events, 60, "the rollback's event after the receiver came back")
    time.sleep(2)  # rounds go on: nothing more may arrive
    got = receiver.bodies()
    ids = [g.headers["Cohort-Webhook-Id"] for g in got]
    assert len(ids) == len(set(ids)), ids  # each delivery once
    assert all(documented_verify()(hook.secret, g.headers, g.body) for g in got)
    events = sorted(g.json["event"] for g in got)
    assert events == sorted(
        ["schedule.fired"] * 3 + ["model.version_registered"] * 3 + ["model.alias_moved"] * 3
    )
    rollback = next(
        g.json["data"]["alias"]
        for g in got
        if g.json["data"].get("alias", {}).get("reason") == "version 3 misreads sevens"
    )
    assert (rollback["from_version"], rollback["to_version"]) == (3, 1)
    receiver.down()
