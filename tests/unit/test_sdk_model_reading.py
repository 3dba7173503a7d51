"""An SDK model reads two ways: typed attributes, and the API's JSON by key."""

from __future__ import annotations

import datetime as dt

import pytest

from cohort.api_models import JobRead
from tests.unit.test_cli_style import JOB

REPLICA = {
    "index": 0, "attempt": 1, "role": "worker", "role_index": 0, "restarts": 0,
    "node_id": "n1", "address": "10.0.0.1:29500", "status": "running", "pid": 42,
    "exit_code": None, "failure": None, "preparing": None, "tf_config": {},
    "started_at": "2026-11-29T11:00:00.250000Z", "finished_at": None,
}  # fmt: skip


def test_attributes_are_typed_and_keys_are_the_json() -> None:
    body = {**JOB, "replica_list": [REPLICA], "surprise": {"from": "a newer server"}}
    job = JobRead.model_validate(body)
    assert job.created_at == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert job.replica_list[0].started_at.microsecond == 250000
    # By key, what the API sent: strings for times, dicts for nested shapes.
    assert dt.datetime.fromisoformat(job["created_at"]) == job.created_at
    assert job["replica_list"][0]["started_at"] == "2026-11-29T11:00:00.250000Z"
    assert job["surprise"] == {"from": "a newer server"} and "surprise" in job
    assert job.get("nothing", 7) == 7 and "nothing" not in job
    with pytest.raises(KeyError):
        job["nothing"]
    assert job.to_dict()["replica_list"][0]["pid"] == 42


def test_a_schedules_code_goes_to_its_job_template_or_its_sweeps() -> None:
    from cohort.specs import with_bundle

    digest = "sha256:" + "a" * 64
    job = {"name": "s", "job": {"command": ["python", "train.py"]}}
    assert with_bundle(job, digest)["job"] == {"command": ["python", "train.py"], "bundle": digest}
    assert "bundle" not in job["job"]  # the caller's spec is left as it was
    sweep = {"name": "s", "sweep": {"name": "w", "job": {"command": ["python", "t.py"]}}}
    assert with_bundle(sweep, digest)["sweep"]["job"]["bundle"] == digest
    with pytest.raises(ValueError, match="no `job`"):
        with_bundle({"name": "s"}, digest)
