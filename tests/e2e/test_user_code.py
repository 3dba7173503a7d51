"""End to end: the node runs users' own code. A bundle's `module:function` trainer,
submitted with the installed `cohort job submit --code`, and a bundle's `command` script,
submitted by the SDK example (2 replicas each, MultiWorkerMirroredStrategy) succeed; a
command not on the node fails its job with exit 127 and the reason; a script with a
SyntaxError fails its job after one attempt under `on_failure`, its reason saying why; a
forged start message naming an unlisted trainer is refused by the agent (reported, never
started)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml

from cli.stack import Stack
from cohort.client import Client
from services.wire.keys import EVENTS_STREAM
from services.wire.replica import START_TASK, ReplicaSpec, StartReplica
from services.wire.signing import node_key, seal_message
from tests.e2e.conftest import wait_for, wait_terminal
from workers import layout
from workers.celery_app import make_celery

pytestmark = pytest.mark.e2e

COHORT = str(Path(sys.executable).parent / "cohort")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def submit(stack: Stack, tmp_path: Path, spec: dict[str, Any], code: Path | None) -> int:
    """`cohort job submit job.yaml [--code DIR]` as a user's shell runs it; the job's id."""
    path = tmp_path / f"job-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {key: value for key, value in os.environ.items() if not key.startswith("COHORT_")}
    env |= {
        "COHORT_URL": stack.url,
        "COHORT_TOKEN": stack.token,
        "COHORT_DATA_DIR": str(tmp_path / "client"),
    }
    argv = [COHORT, "submit", str(path), *(["--code", str(code)] if code else [])]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return int(done.stdout.split("submitted job ")[1].split()[0])


def failure_of(client: Client, job_id: int) -> str:
    job = client.job(job_id)
    return f"{job['reason']}\n" + "\n".join(
        f"{line['replica']}: {line['line']}" for line in client.logs(job_id, limit=200)
    )


def test_a_bundle_trainer_runs_from_the_bundle(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = module_stack
    job_id = submit(
        stack,
        tmp_path,
        {
            "name": "keras-fit",
            "trainer": "trainer:train",
            "replicas": 2,
            "strategy": "multi_worker_mirrored",
            "restart_policy": "never",
            "hyperparameters": {"epochs": 1, "steps_per_epoch": 4, "layers": [8]},
        },
        EXAMPLES / "keras_fit",
    )
    final = wait_terminal(client, job_id)
    assert final["status"] == "succeeded", failure_of(client, job_id)
    data_dir = stack.settings.data_dir
    assert (layout.model_dir(data_dir, job_id) / "saved_model.pb").is_file()
    for index in (0, 1):
        code = layout.code_dir(data_dir, job_id, 1, index)
        assert (code / "trainer.py").is_file()  # each replica its own copy of the code
        hyperparameters = layout.hyperparameters_file(data_dir, job_id, 1, index)
        assert json.loads(hyperparameters.read_text())["layers"] == [8]


def test_the_sdk_example_runs_a_command_script_on_two_replicas(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    """examples/sdk/submit_and_follow.py as shipped, as a user runs it: it submits
    examples/custom_loop (a command script, 2 replicas) with the SDK, follows it, and
    downloads its model."""
    stack, client = module_stack
    env = {key: value for key, value in os.environ.items() if not key.startswith("COHORT_")}
    env |= {"COHORT_URL": stack.url, "COHORT_TOKEN": stack.token, "XDG_CONFIG_HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "sdk" / "submit_and_follow.py")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = int(done.stdout.split("job ")[1].split(":")[0])
    assert f"job {job_id} succeeded" in done.stdout, done.stdout + failure_of(client, job_id)
    assert "status: running" in done.stdout and "step 60:" in done.stdout, done.stdout
    with tarfile.open(tmp_path / "model.tar.gz") as tar:
        assert any(name.endswith("saved_model.pb") for name in tar.getnames())
    data_dir = stack.settings.data_dir
    for index in (0, 1):  # the scalars went where COHORT_TENSORBOARD_DIR said
        assert list(layout.tensorboard_dir(data_dir, job_id, index).glob("events.out.*"))


def test_a_command_not_found_fails_the_job_with_127_and_the_reason(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = module_stack
    job_id = submit(
        stack,
        tmp_path,
        {
            "name": "typo",
            "command": ["pythno", "train.py"],
            "replicas": 1,
            "strategy": "one_device",
            "restart_policy": "never",
        },
        None,
    )
    final = wait_terminal(client, job_id, timeout=60)
    assert final["status"] == "failed"
    assert "command not found: pythno" in failure_of(client, job_id)
    assert [r["exit_code"] for r in final["replica_list"]] == [127]


def test_a_syntax_error_under_on_failure_fails_after_one_attempt_saying_why(
    module_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = module_stack
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text("print('starting')\ndef train(:\n    pass\n")
    job_id = submit(
        stack,
        tmp_path,
        {
            "name": "syntax-error",
            "command": ["python", "train.py"],
            "replicas": 1,
            "strategy": "one_device",
            "restart_policy": "on_failure",
            "max_restarts": 3,
        },
        code,
    )
    final = wait_terminal(client, job_id, timeout=60)
    story = failure_of(client, job_id)
    assert final["status"] == "failed", story
    assert final["attempt"] == 1, story
    assert [r["exit_code"] for r in final["replica_list"]] == [1]
    assert "exited with code 1 (SyntaxError, permanent)" in final["reason"], story
    assert final["reason"].endswith(
        "not restarted: the failure is permanent (another attempt would fail the same way)"
    )
    assert "restarting" not in [e["to_status"] for e in client.events(job_id)]


def test_a_signed_start_naming_an_unlisted_trainer_is_refused_by_the_nodes_policy(
    module_stack: tuple[Stack, Client],
) -> None:
    # Sealed with the node's key, as the scheduler would: the agent's own policy check
    # still refuses it (tests/e2e/test_wire_trust.py: messages not signed so).
    stack, _client = module_stack
    bus = redis.Redis.from_url(stack.settings.redis_url, decode_responses=True)
    job_id = 990_777  # no such job: only the agent's answer matters
    forged = StartReplica(
        "e2e-node",
        ReplicaSpec(job_id, 1, 0, 1, "os:system", "one_device", {"cmd": "touch /tmp/pwned"}),
    )
    key = node_key(stack.env["COHORT_SIGNING_KEY"], "e2e-node")
    make_celery(stack.settings.redis_url).send_task(
        START_TASK, args=[seal_message(key, forged)], queue="node.e2e-node"
    )

    def answer() -> dict[str, Any] | None:
        for _id, fields in bus.xrange(EVENTS_STREAM):
            data = json.loads(fields["data"])
            if data.get("job_id") == job_id:
                return {"kind": fields["kind"], **data}
        return None

    event = wait_for(answer, 30, "the agent's answer to the forged start")
    assert event["kind"] == "replica_exited" and event["never_started"], event
    assert event["exit_code"] == 126
    assert "entrypoint 'os:system' is not allowed" in event["log_tail"]
    assert not layout.work_dir(stack.settings.data_dir, job_id, 1, 0).exists()
