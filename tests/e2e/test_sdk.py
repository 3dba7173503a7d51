"""End to end: the Python SDK as a user's notebook uses it, against the real stack.

`Client` submits a spec with a code directory, follows the job's stream as typed events
(status changes, every metric point, every output line), waits, reads metrics and logs,
lists and downloads the model; `AsyncClient` does the same from asyncio; a bad spec is
an ApiError naming the field. No TensorFlow: the script is a few lines of Python.
"""

from __future__ import annotations

import asyncio
import hashlib
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


def test_the_async_client_does_the_same(
    module_stack: tuple[Stack, Client], code: Path, tmp_path: Path
) -> None:
    stack, client = module_stack
    data = tmp_path / "holdout.csv"
    data.write_bytes(b"x,y\n" + b"1,2\n" * 100_000)  # over one chunk: a streamed upload

    async def run() -> tuple[str, list[int], int, list[str], bytes, str | None]:
        async with AsyncClient(stack.url, stack.token) as aclient:
            job = await aclient.submit({**SPEC, "name": "sdk-async"}, code=code)
            steps = [e.point.step async for e in job.follow() if isinstance(e, MetricEvent)]
            done = await job.wait(timeout=120)
            files = [a.path for a in await aclient.artifacts(done.id, "model")]
            part = tmp_path / "part"
            await aclient.download(done.id, files[0], part, start=2, end=9)
            stored = await aclient.upload_data("sdk-async/holdout.csv", data)
            return done.status, steps, done.id, files, part.read_bytes(), stored.sha256

    status, steps, job_id, files, part, sha256 = asyncio.run(run())
    assert status == "succeeded"
    assert sorted(steps) == list(range(1, 21))
    # Listed under `model` only, and a byte range as the sync client reads the whole file.
    assert files and all(f.startswith("model/") for f in files)
    whole = tmp_path / "whole"
    client.download(job_id, files[0], whole)
    assert part == whole.read_bytes()[2:9]
    assert sha256 == "sha256:" + hashlib.sha256(data.read_bytes()).hexdigest()


def test_a_refused_spec_is_an_api_error_naming_the_field(
    module_stack: tuple[Stack, Client],
) -> None:
    stack, _ = module_stack
    with Client(stack.url, stack.token) as client, pytest.raises(ApiError) as refused:
        client.submit({**SPEC, "replicas": 0})
    assert refused.value.status == 422
    assert any("replicas" in problem["field"] for problem in refused.value.fields)
