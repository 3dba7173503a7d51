"""Strategy options over REST: parameter_server roles, the distribution block, profiles.
Every refusal is a 422 naming the field, and stores nothing."""

from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.models import Job

PS: dict[str, Any] = {
    "name": "ps",
    "trainer": "mlp_digits",
    "strategy": "parameter_server",
    "roles": {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1},
}


def count_jobs(session: Session) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(Job)).scalar_one()


def refused(
    client: TestClient, auth: dict[str, str], session: Session, spec: dict[str, Any]
) -> dict[str, Any]:
    response = client.post("/api/v1/jobs", json=spec, headers=auth)
    assert response.status_code == 422, response.text
    assert count_jobs(session) == 0
    body: dict[str, Any] = response.json()
    assert body["error"] == "invalid_request"
    return body


def test_parameter_server_job_derives_replicas_from_roles(
    client: TestClient, auth: dict[str, str]
) -> None:
    response = client.post(
        "/api/v1/jobs", json={**PS, "role_placement": {"ps": "separate"}}, headers=auth
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["strategy"] == "parameter_server"
    assert body["replicas"] == 5
    assert body["roles"] == {"chief": 1, "worker": 2, "ps": 1, "evaluator": 1}
    assert body["role_placement"] == {"chief": "any", "ps": "separate"}
    assert body["profile"] is None
    assert body["distribution"]["communication"] == "auto"


def test_explicit_replicas_equal_to_the_roles_sum_is_accepted(
    client: TestClient, auth: dict[str, str]
) -> None:
    response = client.post("/api/v1/jobs", json={**PS, "replicas": 5}, headers=auth)
    assert response.status_code == 201, response.text


def test_distribution_is_stored_and_shown(client: TestClient, auth: dict[str, str]) -> None:
    response = client.post(
        "/api/v1/jobs",
        json={
            "strategy": "mirrored",
            "replicas": 1,
            "distribution": {
                "communication": "hierarchical_copy",
                "cpu_devices": 2,
                "mixed_precision": "mixed_bfloat16",
                "gradient_accumulation_steps": 4,
            },
        },
        headers=auth,
    )
    assert response.status_code == 201, response.text
    shown = client.get(f"/api/v1/jobs/{response.json()['id']}", headers=auth).json()
    assert shown["distribution"] == {
        "communication": "hierarchical_copy",
        "mixed_precision": "mixed_bfloat16",
        "gradient_accumulation_steps": 4,
        "shard_policy": "auto",
        "cpu_devices": 2,
        "devices_per_replica": 1,
    }


@pytest.mark.parametrize(
    ("patch", "field", "words"),
    [
        ({"roles": None}, "roles", "parameter_server needs its roles"),
        ({"replicas": 4}, "replicas", "the roles add up to 5"),
        ({"roles": {"chief": 1, "worker": 0, "ps": 1}}, "roles.worker", "greater than or equal"),
        ({"roles": {"chief": 1, "worker": 2}}, "roles.ps", "Field required"),
        ({"roles": {"chief": 2, "worker": 2, "ps": 1}}, "roles.chief", "less than or equal"),
        (
            {"roles": {"worker": 2, "ps": 1, "evaluator": 2}},
            "roles.evaluator",
            "less than or equal",
        ),
        ({"roles": {"worker": 2, "ps": 1, "master": 1}}, "roles.master", "remove this field"),
        ({"role_placement": {"ps": "elsewhere"}}, "role_placement.ps", "'any' or 'separate'"),
        (
            {"distribution": {"communication": "ring"}},
            "distribution.communication",
            "does not fit parameter_server; use auto",
        ),
        (
            {"distribution": {"gradient_accumulation_steps": 4}},
            "distribution.gradient_accumulation_steps",
            "asynchronously",
        ),
        (
            {"distribution": {"shard_policy": "data"}},
            "distribution.shard_policy",
            "leave it at 'auto'",
        ),
        ({"profile": {"steps": [5, 8]}}, "profile", "cannot be profiled by step range"),
        ({"profile": {"steps": [8, 5]}}, "profile.steps", "first <= last"),
    ],
)
def test_parameter_server_refusals_name_the_field(
    client: TestClient,
    auth: dict[str, str],
    session: Session,
    patch: dict[str, Any],
    field: str,
    words: str,
) -> None:
    spec = {k: v for k, v in {**PS, **patch}.items() if v is not None}
    body = refused(client, auth, session, spec)
    assert body["fields"][0]["field"] == field, body
    assert words in body["fields"][0]["message"], body


@pytest.mark.parametrize(
    ("spec", "field", "words"),
    [
        ({"replicas": 2, "roles": {"worker": 1, "ps": 1}}, "roles", "only a parameter_server"),
        (
            {"replicas": 2, "role_placement": {"ps": "separate"}},
            "role_placement",
            "only a parameter_server",
        ),
        (
            {"replicas": 2, "distribution": {"communication": "nccl"}},
            "distribution.communication",
            "nccl runs on GPUs",
        ),
        (
            {"replicas": 2, "distribution": {"communication": "hierarchical_copy"}},
            "distribution.communication",
            "use auto or nccl or ring",
        ),
        (
            {"strategy": "mirrored", "replicas": 1, "distribution": {"communication": "ring"}},
            "distribution.communication",
            "does not fit mirrored",
        ),
        (
            {"strategy": "one_device", "replicas": 1, "distribution": {"communication": "nccl"}},
            "distribution.communication",
            "does not fit one_device",
        ),
        (
            {"replicas": 2, "distribution": {"cpu_devices": 2}},
            "distribution.cpu_devices",
            "for mirrored and one_device",
        ),
        (
            {
                "strategy": "mirrored",
                "replicas": 1,
                "gpus_per_replica": 2,
                "distribution": {"cpu_devices": 2},
            },
            "distribution.cpu_devices",
            "uses them",
        ),
        (
            {"strategy": "one_device", "replicas": 1, "distribution": {"devices_per_replica": 2}},
            "distribution.devices_per_replica",
            "each replica has 1",
        ),
        (
            {"replicas": 2, "distribution": {"comunication": "ring"}},
            "distribution.comunication",
            "did you mean `communication`?",
        ),
        (
            {"replicas": 2, "distribution": {"communication": "fast"}},
            "distribution.communication",
            "Input should be",
        ),
        ({"strategy": "mirrored", "replicas": 2}, "replicas", "runs one replica"),
        (
            {"replicas": 2, "distribution": {"shard_policy": "file"}},
            "distribution.shard_policy",
            "cannot be sharded by file",
        ),
        (
            {"replicas": 2, "profile": {"steps": [5, 8], "replicas": [2]}},
            "profile.replicas",
            "replica 2 is not in a gang of 2",
        ),
    ],
)
def test_distribution_refusals_name_the_field(
    client: TestClient,
    auth: dict[str, str],
    session: Session,
    spec: dict[str, Any],
    field: str,
    words: str,
) -> None:
    body = refused(client, auth, session, spec)
    assert body["fields"][0]["field"] == field, body
    assert words in body["fields"][0]["message"], body


@pytest.mark.parametrize(
    "spec",
    [
        {"replicas": 2, "distribution": {"communication": "ring"}},
        {"replicas": 2, "distribution": {"communication": "auto"}},
        {"replicas": 2, "gpus_per_replica": 1, "distribution": {"communication": "nccl"}},
        {
            "strategy": "mirrored",
            "replicas": 1,
            "gpus_per_replica": 4,
            "distribution": {"communication": "nccl", "devices_per_replica": 2},
        },
        {
            "strategy": "one_device",
            "replicas": 1,
            "distribution": {"cpu_devices": 2, "devices_per_replica": 2},
        },
        {"replicas": 2, "profile": {"steps": [5, 8], "replicas": [0, 1]}},
    ],
)
def test_options_that_fit_are_accepted(
    client: TestClient, auth: dict[str, str], spec: dict[str, Any]
) -> None:
    response = client.post("/api/v1/jobs", json=spec, headers=auth)
    assert response.status_code == 201, response.text


def test_the_job_page_shows_roles_and_resubmits_a_ps_job_as_is(
    client: TestClient, session: Session
) -> None:
    import datetime as dt
    import json
    import re

    from services.cluster import gangs
    from services.cluster.nodes import Heartbeat
    from services.scheduling import scheduler_pass
    from services.settings import get_settings
    from tests.api.test_dashboard import login
    from tests.factories import create_job, create_token

    token, row = create_token(session, "ps")
    job = create_job(
        session, row.project_id, **PS, distribution={"mixed_precision": "mixed_bfloat16"}
    )
    now = dt.datetime.now(dt.UTC)
    scheduler_pass.run_pass(
        session=session,
        settings=get_settings(),
        now=now,
        heartbeats=[Heartbeat("n1", "10.9.0.1", 8, 0, now)],
    )
    gangs.record_replica_started(session=session, job_id=job.id, attempt=1, index=1, pid=7, at=now)
    gangs.record_replica_restarted(
        session=session, job_id=job.id, attempt=1, index=1, pid=8, restarts=2
    )
    login(client, token)
    page = client.get(f"/jobs/{job.id}").text
    for label in ("chief 0", "worker 0", "worker 1", "ps 0", "evaluator 0", "restarted 2×"):
        assert label in page, label
    spec = json.loads(re.search(r'id="job-spec">(.*?)</script>', page, re.S).group(1))
    again = client.post("/api/v1/jobs", json=spec)
    assert again.status_code == 201, again.text
    assert again.json()["roles"] == PS["roles"] | {"chief": 1}
    assert again.json()["distribution"]["mixed_precision"] == "mixed_bfloat16"
