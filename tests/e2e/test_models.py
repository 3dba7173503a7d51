"""End to end, on a user's path: real TensorFlow jobs train, `cohort model register` makes
versions 1 and 2 of their models, `production` moves to v2, `cohort model alias ...
--version 1` rolls it back, and `cohort model download digits@production -o DIR` brings
back version 1's files (by their sha256), which load with TensorFlow. The CLI as installed,
against the real stack (PostgreSQL, Redis, scheduler, agent)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.e2e.conftest import wait_terminal
from tests.e2e.test_user_code import COHORT

pytestmark = [pytest.mark.e2e, pytest.mark.slow(60)]

TINY = {
    "trainer": "mlp_digits",
    "strategy": "one_device",
    "replicas": 1,
    "hyperparameters": {"epochs": 1, "steps_per_epoch": 5},
}
LOAD = (
    "import sys, tensorflow as tf; model = tf.saved_model.load(sys.argv[1]); "
    "print(len(model.variables))"
)


def cohort(stack: Stack, *argv: str) -> Any:
    """`cohort ... --json` as a user's shell runs it; its JSON answer."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("COHORT_")}
    env |= {"COHORT_URL": stack.url, "COHORT_TOKEN": stack.token}
    done = subprocess.run(
        [COHORT, *argv, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def trained(client: Client, seed: int) -> int:
    job = client.submit(
        {
            **TINY,
            "name": f"digits-{seed}",
            "hyperparameters": {**TINY["hyperparameters"], "seed": seed},
        }
    )
    ended = wait_terminal(client, job.id, timeout=300)
    assert ended["status"] == "succeeded", ended
    return job.id


def digests(directory: Path) -> dict[str, str]:
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_register_promote_roll_back_and_download_a_model_that_loads(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = module_stack
    first, second = trained(client, 1), trained(client, 2)
    assert cohort(stack, "model", "register", "digits", "--job", str(first))["version"] == 1
    v2 = cohort(stack, "model", "register", "digits", "--job", str(second))
    assert v2["version"] == 2 and v2["lineage"]["job_id"] == second
    assert "eval_accuracy" in v2["lineage"]["metrics"]
    moved = cohort(
        stack,
        "model",
        "alias",
        "digits",
        "production",
        "--version",
        "2",
        "--reason",
        "first release",
    )
    assert moved["version"] == 2
    back = cohort(
        stack, "model", "alias", "digits", "production", "--version", "1", "--reason", "rollback"
    )
    assert back["version"] == 1

    history = client.alias_history("digits", "production").items
    assert [(h.from_version, h.to_version, h.reason) for h in history] == [
        (2, 1, "rollback"),
        (None, 2, "first release"),
    ]
    shown = cohort(stack, "model", "show", "digits")
    assert [(a["name"], a["version"]) for a in shown["aliases"]] == [("production", 1)]

    out = tmp_path / "served"
    got = cohort(stack, "model", "download", "digits@production", "-o", str(out))
    assert (got["model"], got["version"]) == ("digits", 1)
    files = {f.path: f.sha256 for f in client.version_files("digits:1")}
    assert files and digests(out) == files  # version 1's files, not version 2's
    v2_files = {f.path: f.sha256 for f in client.version_files("digits:2")}
    assert files != v2_files
    by_number = cohort(stack, "model", "download", "digits:2", "-o", str(tmp_path / "v2"))
    assert by_number["version"] == 2 and digests(tmp_path / "v2") == v2_files
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD, str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert int(loaded.stdout.strip().splitlines()[-1]) > 0
