"""What a job's MLflow run says (services/tracking/run_fields.py): keys MLflow takes for
any metric name, replicas told apart, hyperparameters flattened, the spec's fields apart."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from services.statuses import JobStatus
from services.tracking.run_fields import (
    MAX_PARAM_VALUE,
    RUN_STATUS,
    metric_key,
    mlflow_key,
    run_params,
    run_tags,
)

MLFLOW_NAME = re.compile(r"^[/\w.\- :]*$")  # MLflow's own check (mlflow/utils/validation.py)


@pytest.mark.parametrize(
    ("name", "replica", "key"),
    [
        ("loss", 0, "loss"),
        ("loss", 3, "replica_3/loss"),
        ("val/accuracy", 1, "replica_1/val/accuracy"),
        ("top-5 acc (%)", 0, "top-5 acc ___"),
        ("a//b", 0, "_a__b"),
        ("../up", 0, "_.._up"),
        ("/abs", 0, "__abs"),
        (".", 0, "_."),
    ],
)
def test_every_metric_name_becomes_a_key_mlflow_takes(name: str, replica: int, key: str) -> None:
    import posixpath

    got = metric_key(name, replica)
    assert got == key
    assert MLFLOW_NAME.match(got) and posixpath.normpath(got) == got and not got.startswith("..")


def job(**fields: object) -> SimpleNamespace:
    base = {
        "id": 7,
        "name": "digits",
        "hyperparameters": {},
        "strategy": "multi_worker_mirrored",
        "replicas": 2,
        "command": ["python", "train.py"],
        "trainer": None,
        "status": JobStatus.RUNNING,
        "attempt": 1,
        "reason": "",
    }
    return SimpleNamespace(**{**base, **fields})


def test_params_are_the_hyperparameters_flattened_and_the_specs_fields_apart() -> None:
    params = run_params(
        job(
            hyperparameters={
                "learning_rate": 0.1,
                "optimizer": {"name": "adam", "beta": [0.9, 0.99]},
                "strategy": "mine",  # a hyperparameter named like a spec field: both kept
                "long": "x" * 7000,
                "flag": True,
            },
            distribution={"shard_policy": "data"},
        )
    )
    assert params["learning_rate"] == "0.1"
    assert params["optimizer.name"] == "adam" and params["optimizer.beta"] == "[0.9,0.99]"
    assert params["strategy"] == "mine" and params["cohort.strategy"] == "multi_worker_mirrored"
    assert params["cohort.command"] == '["python","train.py"]'
    assert params["cohort.replicas"] == "2" and params["flag"] == "True"
    assert params["cohort.distribution.shard_policy"] == "data"
    assert len(params["long"]) == MAX_PARAM_VALUE and params["long"].endswith("...")
    assert "cohort.trainer" not in params  # unset fields are left out


def test_tags_say_the_job_and_its_end_maps_to_mlflows() -> None:
    tags = run_tags(
        job(status=JobStatus.FAILED, reason="exit 1"), project="p", model_uri="s3://b/m"
    )
    assert tags == {
        "cohort.job_id": "7",
        "cohort.project": "p",
        "cohort.replicas": "2",
        "cohort.status": "failed",
        "cohort.attempt": "1",
        "cohort.model_uri": "s3://b/m",
        "cohort.reason": "exit 1",
    }
    assert RUN_STATUS == {
        JobStatus.SUCCEEDED: "FINISHED",
        JobStatus.FAILED: "FAILED",
        JobStatus.CANCELLED: "KILLED",
    }
    assert mlflow_key("x" * 300) == "x" * 250
