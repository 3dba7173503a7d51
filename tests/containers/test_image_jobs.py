"""Jobs with an `image`, for real: the stack's agent has COHORT_CONTAINER_ENGINE set to the
engine `make images` used, and each replica runs as a container of an image built here
FROM cohort-worker with one package the worker image lacks (`inflection`, its wheel
fetched beforehand and copied in: the build needs no network).

- a 2-replica MultiWorkerMirrored `command` job whose script imports the package succeeds,
  its output reaches the job's logs, and its model downloads;
- the built-in trainer runs Cohort's runner from the image, reporting its metrics;
- a cancel removes both containers within the grace;
- an agent SIGKILLed mid-run, with its guards: its containers outlive it, and are gone
  once the next agent has started (found by their labels);
- an agent SIGKILLed alone: its guards stop the containers without any agent;
- a drain's "checkpoint now" reaches a container replica (the engine's kill), which saves
  and exits 75; the job resumes after the step saved;
- an image the engine cannot find fails the job, the engine's words in its logs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.containers.conftest import Images
from tests.e2e.conftest import job_story, pg_stack_with, wait_for, wait_terminal
from tests.e2e.test_user_code import failure_of, submit
from tests.faults.conftest import steps_seen

pytestmark = [pytest.mark.slow(600), pytest.mark.timeout(1800)]

PACKAGE = "inflection==0.5.1"
TEST_LABEL = "cohort.test=image-job"
IMAGE = "localhost/cohort-test-image-job:1"
GRACE = 5.0  # COHORT_STOP_GRACE of these stacks
SCRIPT = """\
import json, os, time

import inflection  # in the job's image only
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
print("replica", index, inflection.camelize("image_per_job"), "as uid", os.getuid(), flush=True)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
features = tf.random.normal((64, 4))
data = tf.data.Dataset.from_tensor_slices((features, tf.reduce_sum(features, 1))).batch(16)
model.fit(data.repeat(), epochs=1, steps_per_epoch=4, verbose=2)
hold = float(os.environ.get("HOLD_SECONDS", "0"))
if hold:
    print("holding", flush=True)
    time.sleep(hold)
# Every worker saves (a collective); the chief's copy is the model.
target = os.environ["COHORT_MODEL_DIR"] if index == 0 else os.environ["TMPDIR"] + "/m1"
model.save(target)
print("saved", flush=True)
"""


@pytest.fixture(scope="module")
def job_image(images: Images, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An image FROM cohort-worker with `inflection` added from a wheel in the context."""
    context = tmp_path_factory.mktemp("image-job")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(context), PACKAGE],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (context / "Dockerfile").write_text(
        f"FROM {images.refs['worker']}\n"
        "COPY *.whl /tmp/wheels/\n"
        "RUN /opt/cohort/bin/python -m pip install --no-deps --no-index /tmp/wheels/*.whl"
        " && rm -rf /tmp/wheels\n"
    )
    built = subprocess.run(
        [images.engine, "build", "--label", TEST_LABEL, "--tag", IMAGE, str(context)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    yield IMAGE
    subprocess.run([images.engine, "rmi", "--force", IMAGE], capture_output=True, check=False)


def containers_of(engine: str, data_dir: Path, job_id: int | None = None) -> list[str]:
    """The names of the containers an agent on `data_dir` started (of `job_id`), any state."""
    filters = [f"label=cohort.data-dir={data_dir.absolute()}"]
    if job_id is not None:
        filters.append(f"label=cohort.job={job_id}")
    listed = subprocess.run(
        [engine, "ps", "--all", "--format", "{{.Names}}"]
        + [option for f in filters for option in ("--filter", f)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return listed.stdout.split()


@pytest.fixture
def image_stack(images: Images, tmp_path: Path) -> Iterator[tuple[Stack, Client]]:
    env = {
        "COHORT_CONTAINER_ENGINE": images.engine,
        "COHORT_NODE_SLOTS": "2",
        "COHORT_STOP_GRACE": str(GRACE),
    }
    with pg_stack_with(tmp_path, env) as stack:
        try:
            yield stack
        finally:
            left = containers_of(images.engine, stack[0].settings.data_dir)
            if left:
                subprocess.run([images.engine, "rm", "--force", *left], check=False)


def code_dir(tmp_path: Path) -> Path:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(SCRIPT)
    return code


def image_job(image: str, **more: Any) -> dict[str, Any]:
    return {
        "name": "in-an-image",
        "image": image,
        "command": ["python", "train.py"],
        "replicas": 2,
        "strategy": "multi_worker_mirrored",
        "restart_policy": "never",
        **more,
    }


def running_containers(images: Images, stack: Stack, client: Client, job_id: int) -> None:
    """Wait until both replicas hold (their containers up, both printed 'holding')."""

    def holding() -> bool:
        lines = [line["line"] for line in client.logs(job_id, limit=200)]
        return sum("holding" in line for line in lines) == 2

    wait_for(holding, 240, "both replicas to hold", explain=lambda: job_story(client, job_id))
    names = containers_of(images.engine, stack.settings.data_dir, job_id)
    assert len(names) == 2, names


def test_a_two_replica_job_runs_in_its_image_and_its_model_downloads(
    images: Images, job_image: str, image_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = image_stack
    job_id = submit(stack, tmp_path, image_job(job_image), code_dir(tmp_path))
    final = wait_terminal(client, job_id, timeout=300)
    assert final["status"] == "succeeded", failure_of(client, job_id)
    assert final["image"] == job_image
    assert {node["container_engine"] for node in client.nodes()} == {images.engine}
    lines = [line["line"] for line in client.logs(job_id, limit=500)]
    said = [line for line in lines if "ImagePerJob" in line]  # the package ran, in both
    assert len(said) == 2, lines
    assert all("as uid 0" not in line for line in said)  # the job's uid, never root
    archive = tmp_path / "model.tar.gz"
    client.download(job_id, "model", archive)  # a directory comes as a .tar.gz
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert any(name.endswith("saved_model.pb") for name in names), names
    # --rm: nothing of the job is left on the engine.
    assert containers_of(images.engine, stack.settings.data_dir, job_id) == []


def test_a_builtin_trainer_runs_cohorts_runner_from_the_image(
    job_image: str, image_stack: tuple[Stack, Client]
) -> None:
    _, client = image_stack
    spec = {
        "image": job_image,
        "replicas": 2,
        "hyperparameters": {"epochs": 1, "steps_per_epoch": 5},
    }
    job = client.submit(spec)
    final = wait_terminal(client, job["id"], timeout=300)
    assert final["status"] == "succeeded", failure_of(client, job["id"])
    points = client.metrics(job["id"], name=["loss"], limit=1000)  # through its metrics file
    assert 0 in {p["replica"] for p in points}, points  # the chief reports, at least
    assert max(p["step"] for p in points) >= 1, points


def test_a_cancel_removes_both_containers_within_the_grace(
    images: Images, job_image: str, image_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = image_stack
    spec = image_job(job_image, env={"HOLD_SECONDS": "600"})
    job_id = submit(stack, tmp_path, spec, code_dir(tmp_path))
    running_containers(images, stack, client, job_id)
    cancelled_at = time.monotonic()
    client.cancel(job_id)
    wait_for(
        lambda: not containers_of(images.engine, stack.settings.data_dir, job_id),
        GRACE + 10,
        "both containers to be gone",
    )
    took = time.monotonic() - cancelled_at
    final = wait_terminal(client, job_id, timeout=60)
    assert final["status"] == "cancelled", job_story(client, job_id)
    assert took < GRACE + 10, took


def guards_of(names: list[str]) -> list[psutil.Process]:
    """The guards running the engine client of these containers."""
    return [
        process
        for process in psutil.process_iter(["cmdline"])
        if "--container" in (process.info["cmdline"] or [])
        and any(name in (process.info["cmdline"] or []) for name in names)
    ]


def test_containers_an_agent_killed_with_its_guards_left_are_gone_once_the_next_starts(
    images: Images, job_image: str, image_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = image_stack
    spec = image_job(job_image, env={"HOLD_SECONDS": "600"})
    job_id = submit(stack, tmp_path, spec, code_dir(tmp_path))
    running_containers(images, stack, client, job_id)
    names = containers_of(images.engine, stack.settings.data_dir, job_id)
    guards = guards_of(names)
    assert len(guards) == 2, names
    # The agent and everything of its own on the host: only the engine keeps the
    # containers now (an agent's whole cgroup killed, say).
    stack.kill("agent")
    for guard in guards:
        os.killpg(guard.pid, signal.SIGKILL)
    time.sleep(2)
    assert sorted(containers_of(images.engine, stack.settings.data_dir, job_id)) == sorted(names)
    stack.restart("agent")
    wait_for(
        lambda: not containers_of(images.engine, stack.settings.data_dir),
        60,
        "the next agent to remove its predecessor's containers",
    )
    log = (stack.log_dir / "agent.log").read_text(errors="replace")
    assert "removed 2 containers a previous agent of node e2e-node left" in log, log[-3000:]


def test_an_agent_killed_alone_has_its_guards_stop_its_containers(
    images: Images, job_image: str, image_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = image_stack
    spec = image_job(job_image, env={"HOLD_SECONDS": "600"})
    job_id = submit(stack, tmp_path, spec, code_dir(tmp_path))
    running_containers(images, stack, client, job_id)
    stack.kill("agent")
    # The guard looks once a second, then the engine stops the container (SIGTERM).
    wait_for(
        lambda: not containers_of(images.engine, stack.settings.data_dir, job_id),
        30,
        "the guards to stop the containers",
    )


def test_a_drain_reaches_a_container_replica_which_checkpoints_and_resumes_after_it(
    images: Images, job_image: str, image_stack: tuple[Stack, Client]
) -> None:
    """A drain's "checkpoint now" through the engine: its SIGUSR1 goes by `ENGINE kill
    --signal USR1` to the container (its --init passes it on to Cohort's runner), which
    saves at the next step and exits 75. The only node is drained, so the job waits until
    it is undrained; attempt 2 starts at the step after the one saved."""
    stack, client = image_stack
    spec = {
        "image": job_image,
        "replicas": 1,
        "restart_policy": "never",  # a move is not a restart
        "hyperparameters": {"epochs": 3, "steps_per_epoch": 500},
    }
    job_id = client.submit(spec)["id"]
    wait_for(
        lambda: max(steps_seen(client, job_id, 1), default=0) >= 30,
        240,
        "attempt 1 past step 30",
        explain=lambda: job_story(client, job_id),
    )
    [node] = [n["id"] for n in client.nodes()]
    client.drain_node(node, "maintenance")
    wait_for(
        lambda: any(
            e["reason"].startswith(f"drained from node {node}") for e in client.events(job_id)
        ),
        60,
        "the gang to move",
        explain=lambda: job_story(client, job_id),
    )
    moved = next(e["reason"] for e in client.events(job_id) if "drained from" in e["reason"])
    assert "its replica checkpointed (exit 75)" in moved, job_story(client, job_id)
    assert client.undrain_node(node)["cordon"] is None
    final = wait_terminal(client, job_id, timeout=300)
    assert final["status"] == "succeeded", failure_of(client, job_id)
    assert final["attempt"] == 2, job_story(client, job_id)
    before, after = steps_seen(client, job_id, 1), steps_seen(client, job_id, 2)
    assert min(after) == max(before) + 1, (max(before), min(after))  # none redone
    assert max(after) == 1500, max(after)
    assert containers_of(images.engine, stack.settings.data_dir, job_id) == []


def test_an_image_the_engine_cannot_find_fails_the_job_saying_so(
    image_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = image_stack
    missing = "localhost/cohort-test-no-such-image:0"
    job_id = submit(stack, tmp_path, image_job(missing), code_dir(tmp_path))
    final = wait_terminal(client, job_id, timeout=120)
    assert final["status"] == "failed", job_story(client, job_id)
    said = failure_of(client, job_id)
    assert "cohort-test-no-such-image" in said, said  # the engine's own message
    # 125: the engine could not run the container (its gang's other replica is torn down).
    assert "exited with code 125" in final["reason"], said
