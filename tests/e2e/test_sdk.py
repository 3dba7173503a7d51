"""End to end: the Python SDK as a user's notebook uses it, against the real stack.

`Client` submits a spec with a code directory, follows the job's stream as typed events
(status changes, every metric point, every output line), waits, reads metrics and logs,
lists and downloads the model; `AsyncClient` does the same from asyncio; a bad spec is
an ApiError naming the field. No TensorFlow: the script is a few lines of Python.
"""

from __future__ import annotations

import asyncio
import tarfile
from pathlib import Path

import pytest

from cli.stack import Stack
from cohort import ApiError, AsyncClient, Client, LogEvent, MetricEvent, StatusEvent

# Reports 20 steps, prints a line for each of 3, saves a "model" where Cohort keeps it.
SCRIPT = """\
import os
from pathlib import Path
from cohort import report
for step in range(1, 21):
    report(step, loss=1.0 / step)
    if step % 7 == 0:
        print(f"step {step}", flush=True)
model = Path(os.environ["COHORT_MODEL_DIR"])
model.mkdir(parents=True, exist_ok=True)
(model / "weights.txt").write_text("trained")
print("saved", flush=True)
"""
SPEC = {"name": "sdk", "command": ["python", "train.py"], "strategy": "one_device", "replicas": 1}


@pytest.fixture
def code(tmp_path: Path) -> Path:
    directory = tmp_path / "code"
    directory.mkdir()
    (directory / "train.py").write_text(SCRIPT)
    return directory


def test_submit_follow_wait_and_download(
    module_stack: tuple[Stack, Client], code: Path, tmp_path: Path
) -> None:
    stack, _ = module_stack
    with Client(stack.url, stack.token) as client:
        job = client.submit(SPEC, code=code)
        assert job.status == "queued" and job.bundle and job.bundle.startswith("sha256:")
        events = list(job.follow())
        done = job.wait(timeout=120)
        assert done.status == "succeeded", done.reason
        statuses = [e.job.status for e in events if isinstance(e, StatusEvent)]
        assert statuses[-1] == "succeeded" and "running" in statuses
        points = [e.point for e in events if isinstance(e, MetricEvent)]
        assert sorted(p.step for p in points if p.name == "loss") == list(range(1, 21))
        lines = [e.line for e in events if isinstance(e, LogEvent)]
        assert [line for line in lines if line.startswith(("step", "saved"))] == [
            "step 7", "step 14", "saved",
        ]  # fmt: skip
        # What the stream said is what is stored.
        stored = job.metrics(name="loss")
        assert [(p.step, p.value) for p in stored] == [(p.step, p.value) for p in points]
        assert "saved" in [line.line for line in job.logs()]
        assert "model/weights.txt" in {a.path for a in job.artifacts()}
        archive = done.download("model", tmp_path / "model.tar.gz")
        with tarfile.open(archive) as tar:
            member = tar.extractfile(next(m for m in tar if m.name.endswith("weights.txt")))
            assert member is not None and member.read() == b"trained"
        # The same code is not sent twice: the second job names the bundle already there.
        again = client.submit({**SPEC, "name": "sdk-again"}, code=code)
        assert again.bundle == job.bundle
        assert again.cancel().id == again.id


def test_the_async_client_does_the_same(module_stack: tuple[Stack, Client], code: Path) -> None:
    stack, _ = module_stack

    async def run() -> tuple[str, list[int]]:
        async with AsyncClient(stack.url, stack.token) as client:
            job = await client.submit({**SPEC, "name": "sdk-async"}, code=code)
            steps = [e.point.step async for e in job.follow() if isinstance(e, MetricEvent)]
            done = await job.wait(timeout=120)
            return done.status, steps

    status, steps = asyncio.run(run())
    assert status == "succeeded"
    assert sorted(steps) == list(range(1, 21))


def test_a_refused_spec_is_an_api_error_naming_the_field(
    module_stack: tuple[Stack, Client],
) -> None:
    stack, _ = module_stack
    with Client(stack.url, stack.token) as client, pytest.raises(ApiError) as refused:
        client.submit({**SPEC, "replicas": 0})
    assert refused.value.status == 422
    assert any("replicas" in problem["field"] for problem in refused.value.fields)
