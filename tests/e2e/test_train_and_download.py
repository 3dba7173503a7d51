"""End to end, on a user's path: a custom `strategy.run` loop under
MultiWorkerMirroredStrategy, written by the test into a temporary directory (no Cohort
import), submitted with the installed `cohort job submit job.yaml --code DIR` on 2 replicas;
its `tf.summary` scalars arrive on the job's SSE stream per replica and step; its
SavedModel comes back with `cohort artifact download` and loads with `tf.saved_model.load`."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import pytest

from cli.stack import Stack
from cohort.client import Client
from cohort.sse import parse_lines
from services.statuses import TERMINAL_STATUSES
from tests.e2e.test_user_code import COHORT, failure_of, submit

pytestmark = pytest.mark.e2e

STEPS = 30

TRAIN = textwrap.dedent('''
    """Fits y = x . [1, -2, 0.5, 3] with a custom loop; the chief prints the model's output
    on a probe input, for the test to compare with the model it downloads."""
    import json
    import os
    import shutil
    import sys
    import tempfile

    import tensorflow as tf

    steps = int(sys.argv[1])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    chief = json.loads(os.environ["TF_CONFIG"])["task"]["index"] == 0
    global_batch = 16 * strategy.num_replicas_in_sync
    x = tf.random.Generator.from_seed(1).normal((512, 4))
    y = x @ tf.constant([[1.0], [-2.0], [0.5], [3.0]])
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch)
    batches = iter(strategy.experimental_distribute_dataset(dataset))


    class Linear(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.zeros((4, 1)))

        @tf.function(input_signature=[tf.TensorSpec((None, 4), tf.float32)])
        def __call__(self, features):
            return features @ self.w


    with strategy.scope():
        model = Linear()
        optimizer = tf.optimizers.SGD(0.1)


    @tf.function
    def train_step(batch):
        def step(features, labels):
            with tf.GradientTape() as tape:
                errors = tf.square(model(features) - labels)[:, 0]
                loss = tf.nn.compute_average_loss(errors, global_batch_size=global_batch)
            optimizer.apply_gradients([(tape.gradient(loss, model.w), model.w)])
            return loss

        losses = strategy.run(step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


    writer = tf.summary.create_file_writer(os.environ["COHORT_TENSORBOARD_DIR"])
    with writer.as_default():
        for step in range(1, steps + 1):
            tf.summary.scalar("loss", train_step(next(batches)), step=step)
            if step % 10 == 0:
                writer.flush()
    writer.flush()
    # Saving runs collectives: every worker saves, only the chief's copy is kept.
    target = os.environ["COHORT_MODEL_DIR"] if chief else tempfile.mkdtemp()
    tf.saved_model.save(model, target)
    if chief:
        print("probe", json.dumps(model(tf.ones((1, 4))).numpy().ravel().tolist()), flush=True)
    else:
        shutil.rmtree(target)
''')

LOAD = (
    "import sys, json, tensorflow as tf; model = tf.saved_model.load(sys.argv[1]); "
    "print(json.dumps(model(tf.ones((1, 4))).numpy().ravel().tolist()))"
)


class Until:
    """A deadline (monotonic) for the reader of a stream."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds

    def lines(self, lines: Iterable[str]) -> Iterator[str]:
        """The stream's lines, keep-alive comments included, until the deadline."""
        for line in lines:
            if time.monotonic() > self.at:
                return
            yield line


def follow_losses(
    client: Client, job_id: int, timeout: float = 180
) -> tuple[list[str], dict[int, dict[int, float]]]:
    """Read the job's SSE stream from its start to its terminal status, which is its last
    event (after every point the job will have: README, the job stream), or `timeout`:
    the statuses seen, and the losses by replica and step."""
    statuses: list[str] = []
    losses: dict[int, dict[int, float]] = {0: {}, 1: {}}
    until = Until(timeout)
    with client.http.stream(
        "GET",
        f"/api/v1/jobs/{job_id}/stream",
        params={"kinds": ["status", "metric"]},
        timeout=httpx.Timeout(10.0, read=60.0),
    ) as response:
        assert response.status_code == 200, response.read()
        for event in parse_lines(until.lines(response.iter_lines())):
            if event.event == "status":
                statuses.append(event.data["status"])
                if statuses[-1] in TERMINAL_STATUSES:
                    break  # no point may follow it: the test asserts they all came
            elif event.data["name"] == "loss":
                assert event.data["attempt"] == 1, event.data
                losses[event.data["replica"]][event.data["step"]] = event.data["value"]
    return statuses, losses


def run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_a_custom_loop_from_a_directory_streams_its_scalars_and_its_model_comes_back(
    pg_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = pg_stack
    code = tmp_path / "project"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    job_id = submit(
        stack,
        tmp_path,
        {
            "name": "own-loop",
            "command": ["python", "train.py", str(STEPS)],
            "replicas": 2,
            "strategy": "multi_worker_mirrored",
            "restart_policy": "never",
        },
        code,
    )

    statuses, losses = follow_losses(client, job_id)
    assert statuses and statuses[-1] == "succeeded", (statuses, failure_of(client, job_id))
    for replica, by_step in losses.items():  # every step of each replica, in order
        assert sorted(by_step) == list(range(1, STEPS + 1)), (replica, sorted(by_step))
        assert by_step[STEPS] < by_step[1] / 10, (replica, by_step)  # it learned
    assert losses[0] == pytest.approx(losses[1])  # both saw the all-reduced loss

    env = {key: value for key, value in os.environ.items() if not key.startswith("COHORT_")}
    env |= {
        "COHORT_URL": stack.url,
        "COHORT_TOKEN": stack.token,
        "COLUMNS": "200",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    listed = run(env, COHORT, "artifacts", str(job_id)).stdout
    for path in (
        "model/saved_model.pb",
        "model/variables/variables.index",
        "tensorboard/replica-0/events.out.tfevents.",
        "tensorboard/replica-1/events.out.tfevents.",
        "logs/attempt-1/replica-0.log",
        "logs/attempt-1/replica-1.log",
    ):
        assert path in listed, listed

    out = tmp_path / "out"
    run(env, COHORT, "download", str(job_id), "model", "-o", str(out))
    loaded = json.loads(run(env, sys.executable, "-c", LOAD, str(out / "model")).stdout)
    [printed] = [
        line["line"]
        for line in client.logs(job_id, replica=0, limit=1000)
        if line["line"].startswith("probe ")
    ]
    trained = json.loads(printed.removeprefix("probe "))
    assert loaded == pytest.approx(trained)  # the downloaded model is the trained one
    assert math.isclose(trained[0], 2.5, abs_tol=0.5)  # 1 - 2 + 0.5 + 3, learned
