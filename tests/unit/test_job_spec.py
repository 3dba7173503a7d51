"""The job spec is declared once (services/jobs/spec.py): the create schema and the read
view derive from it, and the stored row and the replica spec must carry each of its
fields under the same name. These tests fail when a field is added in one place only."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, get_args

import pytest

from services.jobs.inputs import resolve_inputs
from services.jobs.replica_specs import (
    FROM_JOB,
    PER_REPLICA,
    REPLICA_FORMS,
    RESOLVED,
    start_message,
)
from services.jobs.schemas import JobCreate, JobRead
from services.jobs.spec import HASHED_ALWAYS, JobSpec, stored_columns
from services.models import Job, Project
from services.statuses import JobStatus
from services.wire.replica import ReplicaSpec

# The `jobs` columns that the control plane writes, not the user.
CONTROL_PLANE_COLUMNS = {
    "id",
    "project_id",
    "not_before",
    "cleaned_at",
    "idempotency_key",
    "spec_hash",
    "status",
    "attempt",
    "moved_attempts",
    "reason",
    "result",
    "created_at",
    "updated_at",
    "started_at",
    "finished_at",
    "schedule_id",
    "scheduled_for",
    "schedule_env",
    "sweep_id",
    "trial_index",
    "requirements",
    "evaluation",  # an evaluation job's files (services/retraining/evaluation.py)
}

# A spec that sets every field away from its default.
EVERY_FIELD_SET: dict[str, Any] = {
    "name": "all fields",
    "command": ["python", "train.py"],
    "bundle": "sha256:" + "a" * 64,
    "image": "localhost/team-tf:1",
    "env": {"LOG_LEVEL": "debug"},
    "inputs": {"train.csv": "data/digits/train.csv"},
    "pip": ["tabulate==0.9.0"],
    "progress_timeout_seconds": 600,
    "strategy": "parameter_server",
    "gpus_per_replica": 1,
    "roles": {"chief": 1, "worker": 2, "ps": 1},
    "role_placement": {"chief": "separate", "ps": "any"},
    "distribution": {"communication": "ring", "gradient_accumulation_steps": 2},
    "profile": {"steps": [3, 5], "replicas": [0, 1]},
    "hyperparameters": {"epochs": 2, "hidden_units": 8},
    "restart_policy": "on_failure",
    "max_restarts": 2,
    "priority": 5,
    "placement": "spread",
    "active_deadline_seconds": 3600,
    "ttl_seconds_after_finished": 60,
}


def _stored(spec: JobSpec) -> Job:
    job = Job(
        **stored_columns(spec),
        id=7,
        project_id=3,
        project=Project(id=3, name="p"),
        status=JobStatus.QUEUED,
        attempt=1,
        reason="",
        created_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    )
    return job


def test_the_example_sets_every_field_of_the_spec() -> None:
    # `trainer` is set too: to None, by giving a command.
    assert set(EVERY_FIELD_SET) | {"trainer", "replicas"} == set(JobSpec.model_fields)


def test_every_spec_field_has_its_column_and_every_other_column_is_the_control_planes() -> None:
    columns = {column.name: column for column in Job.__table__.columns}
    assert set(columns) - CONTROL_PLANE_COLUMNS == set(JobSpec.model_fields)
    for name, field in JobSpec.model_fields.items():
        may_be_none = type(None) in get_args(field.annotation)
        assert columns[name].nullable == may_be_none, name


def test_a_spec_stored_and_read_back_is_the_spec() -> None:
    spec = JobCreate.model_validate(EVERY_FIELD_SET)
    view = JobRead.model_validate(_stored(spec))
    # A command's hyperparameters read back as it gave them: no built-in trainer's defaults.
    given = {**spec.model_dump(), "hyperparameters": EVERY_FIELD_SET["hyperparameters"]}
    assert view.model_dump(include=set(JobSpec.model_fields)) == given
    assert (view.id, view.project, view.status) == (7, "p", JobStatus.QUEUED)


def test_a_command_stores_only_the_hyperparameters_it_gave() -> None:
    command = JobCreate.model_validate({"command": ["python", "train.py"]})
    assert stored_columns(command)["hyperparameters"] == {}
    assert JobRead.model_validate(_stored(command)).model_dump()["hyperparameters"] == {}
    own = JobCreate.model_validate(
        {
            "trainer": "trainer:train",
            "bundle": "sha256:" + "0" * 64,
            "hyperparameters": {"epochs": 2},
        }
    )
    assert stored_columns(own)["hyperparameters"] == {"epochs": 2}


def test_a_built_in_trainer_stores_and_shows_its_defaults() -> None:
    builtin = JobCreate.model_validate({"trainer": "mlp_digits", "hyperparameters": {"epochs": 2}})
    full = {"epochs": 2, "steps_per_epoch": 20, "batch_size": 32, "learning_rate": 0.01}
    assert stored_columns(builtin)["hyperparameters"] == full
    assert JobRead.model_validate(_stored(builtin)).model_dump()["hyperparameters"] == full


def test_the_create_schema_and_the_read_view_are_the_spec_plus_their_own() -> None:
    assert issubclass(JobCreate, JobSpec) and set(JobCreate.model_fields) == set(
        JobSpec.model_fields
    )
    assert issubclass(JobRead, JobSpec)
    assert HASHED_ALWAYS <= set(JobSpec.model_fields)


def test_every_replica_spec_field_is_a_job_field_or_says_which_replica() -> None:
    replica_fields = {field.name for field in dataclasses.fields(ReplicaSpec)}
    assert replica_fields == set(FROM_JOB) | PER_REPLICA | set(RESOLVED)
    assert not (PER_REPLICA | set(RESOLVED)) & set(JobSpec.model_fields)
    assert set(REPLICA_FORMS) <= set(FROM_JOB)


@dataclasses.dataclass
class _Placed:
    attempt: int = 1
    index: int = 1
    role: str = "worker"
    role_index: int = 0
    node_id: str = "n1"
    port: int = 29500
    gpu_ids: str = "0"
    tf_config: dict[str, Any] | None = None


@pytest.mark.parametrize("name", sorted(set(FROM_JOB) - set(REPLICA_FORMS)))
def test_a_job_field_reaches_the_replica_as_stored(name: str) -> None:
    spec = JobCreate.model_validate(EVERY_FIELD_SET)
    message = start_message(_stored(spec), _Placed())
    assert getattr(message.spec, name) == stored_columns(spec)[name]


def test_the_fields_a_replica_gets_in_another_form() -> None:
    spec = JobCreate.model_validate(EVERY_FIELD_SET)
    replica = start_message(_stored(spec), _Placed()).spec
    assert replica.inputs == resolve_inputs(_stored(spec))
    assert replica.inputs["train.csv"].endswith("digits/train.csv")
    assert replica.distribution == spec.distribution
    assert replica.profile is not None and (
        replica.profile.first_step,
        replica.profile.last_step,
    ) == (3, 5)
    assert start_message(_stored(spec), _Placed(index=2)).spec.profile is None
    # A command reads its hyperparameters as it gave them, no built-in defaults.
    assert replica.hyperparameters == EVERY_FIELD_SET["hyperparameters"]


def test_a_trainer_of_the_jobs_own_code_gets_the_built_in_knobs_defaults() -> None:
    own = JobCreate.model_validate(
        {
            "trainer": "trainer:train",
            "bundle": "sha256:" + "0" * 64,
            "hyperparameters": {"epochs": 2},
        }
    )
    replica = start_message(_stored(own), _Placed()).spec
    assert replica.hyperparameters == {
        "epochs": 2,
        "steps_per_epoch": 20,
        "batch_size": 32,
        "learning_rate": 0.01,
    }
