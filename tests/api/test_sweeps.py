"""REST sweeps API against PostgreSQL: create, read, list, cancel, and bad input (422
naming the field, nothing stored)."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from services.models import Job, Sweep
from tests.factories import create_token

TEMPLATE: dict[str, Any] = {
    "trainer": "mlp_digits",
    "strategy": "one_device",
    "replicas": 1,
    "hyperparameters": {"epochs": 1, "steps_per_epoch": 2},
}
BODY: dict[str, Any] = {
    "name": "lr-width",
    "template": TEMPLATE,
    "space": {"grid": {"learning_rate": [0.1, 0.01], "width": [8, 16]}},
    "max_concurrent": 2,
    "objective": {"metric": "eval_accuracy", "mode": "max"},
}


RANGE: dict[str, Any] = {
    "learning_rate": {"distribution": "log_uniform", "low": 0.001, "high": 0.1},
}
INTS: dict[str, Any] = {"distribution": "int", "low": 1, "high": 4}
CHOICE: dict[str, Any] = {"distribution": "choice", "values": ["relu", "tanh"]}


def count(session: Session, model: type) -> int:
    return session.execute(sa.select(sa.func.count()).select_from(model)).scalar_one()


def create(client: TestClient, auth: dict[str, str], **patch: Any) -> dict[str, Any]:
    response = client.post("/api/v1/sweeps", json={**BODY, **patch}, headers=auth)
    assert response.status_code == 201, response.text
    return response.json()


def test_create_read_list_cancel(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    body = create(client, auth)
    assert body["status"] == "running" and body["trials_total"] == 4
    assert body["trials_created"] == 0 and body["trials"] == []
    assert body["objective"] == {
        "metric": "eval_accuracy",
        "mode": "max",
        "replica": 0,
        "value": "last",
    }
    assert body["template"]["strategy"] == "one_device" and body["seed"] is None
    assert body["algorithm"] == "grid" and body["early_stopping"] is None

    from services.settings import get_settings
    from services.sweeps.advance import advance_sweeps

    advance_sweeps(session=session, settings=get_settings())
    one = client.get(f"/api/v1/sweeps/{body['id']}", headers=auth).json()
    assert [t["index"] for t in one["trials"]] == [0, 1]
    assert one["trial_counts"] == {"queued": 2}

    jobs = client.get(f"/api/v1/jobs?sweep_id={body['id']}", headers=auth).json()["items"]
    assert sorted(j["trial_index"] for j in jobs) == [0, 1]
    assert {j["sweep_id"] for j in jobs} == {body["id"]}
    # A trial's parameters are the ones its job got.
    for trial in one["trials"]:
        job = next(j for j in jobs if j["trial_index"] == trial["index"])
        assert trial["parameters"] == {
            k: job["hyperparameters"][k] for k in ("learning_rate", "width")
        }

    listed = client.get("/api/v1/sweeps", headers=auth).json()
    assert [s["id"] for s in listed["items"]] == [body["id"]]
    assert listed["items"][0]["trials"] is None

    cancelled = client.post(f"/api/v1/sweeps/{body['id']}/cancel", headers=auth)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["trial_counts"] == {"cancelled": 2}
    again = client.post(f"/api/v1/sweeps/{body['id']}/cancel", headers=auth)
    assert again.status_code == 409 and "already ended" in again.json()["message"]


def test_sampled_sweeps_report_their_seed_algorithm_and_rule(
    client: TestClient, auth: dict[str, str]
) -> None:
    space = {"random": {"learning_rate": {"distribution": "uniform", "low": 0.001, "high": 0.1}}}
    drawn = create(client, auth, space=space, trials=3)
    assert isinstance(drawn["seed"], int) and drawn["trials_total"] == 3
    assert drawn["algorithm"] == "random"
    given = create(
        client,
        auth,
        space={**space, "seed": 7},
        trials=3,
        algorithm="tpe",
        early_stopping={"rule": "asha", "min_steps": 5},
    )
    assert given["seed"] == 7 and given["algorithm"] == "tpe"
    assert given["early_stopping"] == {"rule": "asha", "min_steps": 5, "reduction_factor": 4}


@pytest.mark.parametrize(
    ("patch", "field", "words"),
    [
        ({"space": {}}, "space", "the space is empty"),
        ({"space": {"grid": {}}}, "space", "the space is empty"),
        ({"space": {"grid": {"lr": []}}}, "space.grid.lr", "at least 1"),
        (
            {"space": {"grid": {"a": list(range(40)), "b": list(range(30))}}},
            "space.grid",
            "1200 combinations, over the limit of 1000",
        ),
        (
            {
                "space": {"random": {"lr": {"distribution": "gaussian", "low": 0, "high": 1}}},
                "trials": 3,
            },
            "space.random.lr",
            "does not match any of the expected tags",
        ),
        (
            {
                "space": {"random": {"lr": {"distribution": "log_uniform", "low": 0, "high": 1}}},
                "trials": 3,
            },
            "space.random.lr.log_uniform.low",
            "greater than 0",
        ),
        (
            {
                "space": {"random": {"lr": {"distribution": "uniform", "low": 1, "high": 1}}},
                "trials": 3,
            },
            "space.random.lr.uniform",
            "must be below high",
        ),
        (
            {"space": {"random": {"w": {"distribution": "int", "low": 9, "high": 3}}}, "trials": 3},
            "space.random.w.int",
            "must be below high",
        ),
        (
            {"space": {"random": {"lr": {"distribution": "uniform", "low": 0, "high": 1}}}},
            "body",
            "needs `trials`",
        ),
        (
            {
                "space": {"random": {"lr": {"distribution": "uniform", "low": 0.1, "high": 1}}},
                "trials": 1001,
            },
            "trials",
            "over the limit of 1000",
        ),
        ({"max_concurrent": 0}, "max_concurrent", "greater than or equal to 1"),
        ({"objective": {"metric": "eval_accuracy", "mode": "up"}}, "objective.mode", "'min'"),
        ({"template": {**TEMPLATE, "replicas": 2}}, "template.replicas", "runs one replica"),
        (
            {"space": {"grid": {"learning_rate": [0.1, 50.0]}}},
            "space.grid.learning_rate",
            "a trial with learning_rate=50.0 is not a valid job",
        ),
        ({"space": {"grid": {"replicas": [1, 2]}}}, "space.grid.replicas", "with replicas=2"),
        (
            {
                "space": {"random": {"learning_rate": RANGE["learning_rate"], "replicas": INTS}},
                "trials": 3,
            },
            "space.random.replicas",
            "a trial with learning_rate=0.001, replicas=4",
        ),
        ({"space": {"grid": {"lr": [1]}}, "trials": 3}, "trials", "one trial per combination"),
        (
            {
                "space": {
                    "random": {"lr": {"distribution": "uniform", "low": -1e308, "high": 1e308}}
                },
                "trials": 3,
            },
            "space.random.lr.uniform",
            "high - low must be finite floats",
        ),
        (
            {
                "space": {
                    "random": {"lr": {"distribution": "log_uniform", "low": 1, "high": 10**400}}
                },
                "trials": 3,
            },
            "space.random.lr.log_uniform",
            "must be finite floats",
        ),
        (
            {
                "space": {"random": {"w": {"distribution": "int", "low": 0, "high": 2**60}}},
                "trials": 3,
            },
            "space.random.w.int.high",
            "less than or equal to 9007199254740992",
        ),
        ({"space": {"grid": {"lr": [1]}, "seed": 3}}, "space", "`seed` is for a sampled"),
        (
            {
                "space": {
                    "random": {
                        name: {"distribution": "choice", "values": list(range(600))}
                        for name in ("a", "b")
                    }
                },
                "trials": 3,
            },
            "space.random",
            "1199 values to check",
        ),
        ({"algorithm": "bayes"}, "algorithm", "'grid', 'random', 'tpe' or 'cmaes'"),
        ({"algorithm": "tpe"}, "algorithm", "tpe samples distributions (`space.random`)"),
        (
            {"algorithm": "grid", "space": {"random": RANGE}, "trials": 3},
            "algorithm",
            "grid runs every combination of `space.grid`",
        ),
        (
            {"algorithm": "cmaes", "space": {"random": {"act": CHOICE}}, "trials": 3},
            "algorithm",
            "cmaes searches numeric parameters",
        ),
        ({"early_stopping": {"rule": "fancy"}}, "early_stopping", "median, asha or hyperband"),
        ({"early_stopping": {"rule": "asha"}}, "early_stopping.asha.min_steps", "required"),
        (
            {"early_stopping": {"rule": "asha", "min_steps": 0}},
            "early_stopping.asha.min_steps",
            "greater than or equal to 1",
        ),
        (
            {"early_stopping": {"rule": "hyperband", "min_steps": 5}},
            "early_stopping.hyperband.max_steps",
            "required",
        ),
        (
            {"early_stopping": {"rule": "hyperband", "min_steps": 50, "max_steps": 50}},
            "early_stopping.hyperband",
            "min_steps (50) must be below max_steps (50)",
        ),
        (
            {"early_stopping": {"rule": "median", "reduction_factor": 3}},
            "early_stopping.median.reduction_factor",
            "remove this field",
        ),
    ],
)
def test_bad_sweeps_get_422_naming_the_field_and_store_nothing(
    client: TestClient,
    auth: dict[str, str],
    session: Session,
    patch: dict[str, Any],
    field: str,
    words: str,
) -> None:
    response = client.post("/api/v1/sweeps", json={**BODY, **patch}, headers=auth)
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "invalid_request"
    assert [f["field"] for f in body["fields"]][0] == field, body
    assert words in body["message"], body
    assert count(session, Sweep) == 0 and count(session, Job) == 0


def test_the_trial_limit_is_a_setting(
    client: TestClient, auth: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from services.settings import get_settings

    monkeypatch.setenv("COHORT_MAX_SWEEP_TRIALS", "3")
    get_settings.cache_clear()
    try:
        response = client.post("/api/v1/sweeps", json=BODY, headers=auth)
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
    assert response.status_code == 422
    assert response.json()["fields"][0]["field"] == "space.grid"
    assert "COHORT_MAX_SWEEP_TRIALS" in response.json()["message"]


def test_other_projects_sweeps_are_not_found(
    client: TestClient, auth: dict[str, str], session: Session
) -> None:
    body = create(client, auth)
    other, _ = create_token(session, "other")
    headers = {"Authorization": f"Bearer {other}"}
    assert client.get(f"/api/v1/sweeps/{body['id']}", headers=headers).status_code == 404
    assert client.post(f"/api/v1/sweeps/{body['id']}/cancel", headers=headers).status_code == 404
    assert client.get("/api/v1/sweeps", headers=headers).json()["items"] == []


def test_a_schedule_may_fire_a_sweep(client: TestClient, auth: dict[str, str]) -> None:
    sweep = {k: v for k, v in BODY.items() if k != "name"}
    schedule = {
        "name": "nightly",
        "interval_seconds": 3600,
        "sweep": sweep,
        "promote": {"metric": "eval_accuracy", "mode": "max"},
    }
    response = client.post("/api/v1/schedules", json=schedule, headers=auth)
    assert response.status_code == 201, response.text
    assert response.json()["job"] == {} and response.json()["sweep"]["max_concurrent"] == 2
    run = client.post(f"/api/v1/schedules/{response.json()['id']}/trigger", headers=auth)
    assert run.status_code == 201 and run.json()["sweep_id"] is not None
    fired = client.get(f"/api/v1/sweeps/{run.json()['sweep_id']}", headers=auth).json()
    assert fired["schedule_id"] == response.json()["id"] and fired["trials_total"] == 4

    both = client.post("/api/v1/schedules", json={**schedule, "job": TEMPLATE}, headers=auth)
    assert both.status_code == 422 and "exactly one of 'job' and 'sweep'" in both.text
    bad = client.post(
        "/api/v1/schedules",
        headers=auth,
        json={
            **schedule,
            "name": "bad",
            "sweep": {**sweep, "template": {**TEMPLATE, "replicas": 3}},
        },
    )
    assert bad.status_code == 422 and bad.json()["fields"][0]["field"] == "sweep.template.replicas"
