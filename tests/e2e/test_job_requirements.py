"""End to end: a job brings its own packages. A 2-replica MultiWorkerMirrored `command`
job whose script imports a small pure-Python package the node lacks (installed from the
node's index while the test runs, from the bundle's requirements.txt) succeeds; a second
job with the same requirements (given as `pip:`) reuses the environment (both prepare
times printed); two jobs with the same new requirements submitted together build it once;
a misspelt package fails its job, permanently, with pip's words."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.e2e.conftest import wait_terminal
from tests.e2e.test_user_code import failure_of, submit

pytestmark = pytest.mark.e2e

PACKAGE = "tabulate==0.9.0"
TRAIN = """
import json, os, sys
import tabulate
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()


@tf.function
def step():
    return strategy.run(lambda: tf.constant(1.0))


total = strategy.reduce(tf.distribute.ReduceOp.SUM, step(), axis=None)
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
print("interpreter", sys.executable, "tensorflow", tf.__file__)
print(tabulate.tabulate([["worker", index, "sum", float(total)]], tablefmt="plain"))
"""
QUICK = "import sys, text_unidecode; print('interpreter', sys.executable)"


def lines(client: Client, job_id: int) -> list[str]:
    return [line["line"] for line in client.logs(job_id, limit=500)]


def prepare_seconds(client: Client, job: dict[str, Any]) -> float:
    """From the job's placement to its last replica's start: what preparing took."""
    (placed,) = [  # the change to scheduled (its preparing notes stay there)
        e
        for e in client.events(job["id"])
        if e["to_status"] == "scheduled" and e["from_status"] != "scheduled"
    ]
    started = max(dt.datetime.fromisoformat(r["started_at"]) for r in job["replica_list"])
    return (started - dt.datetime.fromisoformat(placed["created_at"])).total_seconds()


def test_the_package_is_not_the_nodes() -> None:
    done = subprocess.run([sys.executable, "-c", "import tabulate"], capture_output=True)
    assert done.returncode != 0


def test_a_gang_imports_its_requirements_and_a_second_job_reuses_them(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = module_stack
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    (code / "requirements.txt").write_text(f"# what train.py imports\n{PACKAGE}\n")
    spec = {
        "name": "own-packages",
        "command": ["python", "train.py"],
        "replicas": 2,
        "strategy": "multi_worker_mirrored",
        "restart_policy": "never",
    }
    first = wait_terminal(client, submit(stack, tmp_path, spec, code), timeout=300)
    assert first["status"] == "succeeded", failure_of(client, first["id"])
    assert first["requirements"] == [PACKAGE] and first["requirements_count"] == 1
    said = lines(client, first["id"])
    assert "cohort: installing 1 package: tabulate==0.9.0" in said
    # The events (and so the live stream and the dashboard) say what the start waited for:
    # at least one replica's agent built it; the other's waited for that build or reused it.
    preparing = [e for e in client.events(first["id"]) if "preparing" in e["reason"]]
    assert preparing, client.events(first["id"])
    assert all(
        e["from_status"] == e["to_status"] == "scheduled"
        and e["reason"].endswith(" preparing: installing 1 package: tabulate==0.9.0")
        for e in preparing
    ), preparing
    assert all(not r["preparing"] for r in first["replica_list"])  # cleared at the start
    assert sum(line.split() == ["worker", str(i), "sum", "2"] for line in said for i in (0, 1)) == 2
    envs = str(stack.settings.data_dir / "envs")
    interpreters = [line for line in said if line.startswith("interpreter ")]
    assert len(interpreters) == 2 and all(envs in line for line in interpreters)
    assert all("envs" not in line.split(" tensorflow ")[1] for line in interpreters)

    (code / "requirements.txt").unlink()
    again = {**spec, "name": "same-packages", "pip": [PACKAGE]}
    second = wait_terminal(client, submit(stack, tmp_path, again, code), timeout=300)
    assert second["status"] == "succeeded", failure_of(client, second["id"])
    assert second["requirements_digest"] == first["requirements_digest"]
    reused = lines(client, second["id"])
    assert not any("Successfully installed" in line for line in reused), reused
    assert not [e for e in client.events(second["id"]) if "preparing" in e["reason"]]
    assert sum("cohort: using the environment of 1 packages" in line for line in reused) == 2
    cold, warm = prepare_seconds(client, first), prepare_seconds(client, second)
    print(f"prepare: {cold:.2f}s building the environment, {warm:.2f}s reusing it")  # noqa: T201


def test_two_jobs_with_the_same_new_requirements_build_once(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = module_stack
    spec = {
        "command": ["python", "-c", QUICK],
        "replicas": 1,
        "strategy": "one_device",
        "pip": ["text-unidecode==1.3"],
    }
    ids = [submit(stack, tmp_path, {**spec, "name": f"together-{i}"}, None) for i in (0, 1)]
    finals = [wait_terminal(client, job_id, timeout=300) for job_id in ids]
    assert [f["status"] for f in finals] == ["succeeded"] * 2, [failure_of(client, i) for i in ids]
    said = [lines(client, job_id) for job_id in ids]
    assert sum(any("Successfully installed" in line for line in job) for job in said) == 1, said


def test_a_misspelt_package_fails_the_job_for_good_with_pips_words(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = module_stack
    spec = {
        "name": "misspelt",
        "command": ["python", "-c", "print('never runs')"],
        "replicas": 1,
        "strategy": "one_device",
        "restart_policy": "on_failure",
        "max_restarts": 3,
        "pip": ["tabulatte-no-such-package==0.9.0"],
    }
    final = wait_terminal(client, submit(stack, tmp_path, spec, None), timeout=300)
    story = failure_of(client, final["id"])
    assert final["status"] == "failed" and final["attempt"] == 1, story
    assert "tabulatte-no-such-package" in final["reason"] and "permanent" in final["reason"], story
    assert "never runs" not in story
