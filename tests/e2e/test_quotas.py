"""Quotas against a real api process on PostgreSQL: 50 submissions at once over HTTP admit
exactly the project's queued-jobs quota; defaults come from COHORT_QUOTA_* as an operator
sets them; an admin changes a project's quota with `cohort quota`."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

from cli.stack import Stack
from tests.e2e.conftest import pg_stack_with

SUBMISSIONS = 50
JOB = {"strategy": "one_device", "replicas": 1}


def cohort(stack: Stack, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as the cluster's admin runs it (the bootstrap token; `--token` overrides)."""
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        env={**stack.env, "COHORT_URL": stack.url, "COHORT_TOKEN": stack.token},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def submit_at_once(url: str, token: str, count: int) -> list[httpx.Response]:
    barrier = threading.Barrier(count)
    answers: list[httpx.Response] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            with httpx.Client(
                base_url=url, timeout=60, headers={"Authorization": f"Bearer {token}"}
            ) as client:
                barrier.wait(timeout=30)
                answers.append(client.post("/api/v1/jobs", json=JOB))
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    return answers


def test_quota_holds_under_fifty_concurrent_submissions(tmp_path: Path) -> None:
    env = {"COHORT_QUOTA_MAX_QUEUED_JOBS": "5", "COHORT_QUOTA_MAX_PRIORITY": "0"}
    # The api alone: no scheduler places the jobs, so every admitted one stays queued.
    with pg_stack_with(tmp_path, env, parts=("api",)) as (stack, admin):
        made = cohort(stack, "create-token", "--project", "race")
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip()

        answers = submit_at_once(stack.url, token, SUBMISSIONS)
        codes = sorted(a.status_code for a in answers)
        assert codes == [201] * 5 + [429] * (SUBMISSIONS - 5), codes
        refusal: dict[str, Any] = next(a.json() for a in answers if a.status_code == 429)
        assert (refusal["error"], refusal["quota"], refusal["used"], refusal["allowed"]) == (
            "quota_exceeded",
            "max_queued_jobs",
            5,
            5,
        )
        assert len(admin.request("GET", "/api/v1/projects/race/quota")["overrides"]) == 5
        with httpx.Client(
            base_url=stack.url, headers={"Authorization": f"Bearer {token}"}
        ) as client:
            listed = client.get("/api/v1/jobs").json()["items"]
            assert sorted(j["queue_position"] for j in listed) == [1, 2, 3, 4, 5]
            above = client.post("/api/v1/jobs", json={**JOB, "priority": 1})
            assert above.status_code == 403 and above.json()["allowed"] == 0

            # The project's own token may not see or change its quota.
            denied = cohort(
                stack, "quota", "set", "race", "--max-queued-jobs", "50", "--token", token
            )
            assert denied.returncode == 2 and "HTTP 403" in denied.stderr

            # An admin raises it by one: one more job gets in, the next is refused.
            raised = cohort(stack, "quota", "set", "race", "--max-queued-jobs", "6", "--json")
            assert raised.returncode == 0, raised.stderr
            quota = json.loads(raised.stdout)
            assert quota["limits"]["max_queued_jobs"] == 6
            assert quota["used"]["queued_jobs"] == 5
            assert quota["limits"]["max_priority"] == 0  # COHORT_QUOTA_MAX_PRIORITY
            assert [client.post("/api/v1/jobs", json=JOB).status_code for _ in range(2)] == [
                201,
                429,
            ]

        shown = cohort(stack, "quota", "show", "race")
        assert shown.returncode == 0, shown.stderr
        row = next(line for line in shown.stdout.splitlines() if "max_queued_jobs" in line)
        # limit, in force, used, the project's own, the default (COHORT_QUOTA_MAX_QUEUED_JOBS)
        assert [cell.strip() for cell in row.split("│")[1:-1]] == [
            "max_queued_jobs",
            "6",
            "6",
            "6",
            "5",
        ], shown.stdout
        back = cohort(stack, "quota", "set", "race", "--max-queued-jobs", "default", "--json")
        assert json.loads(back.stdout)["limits"]["max_queued_jobs"] == 5
        bad = cohort(stack, "quota", "set", "race", "--max-gpus", "lots")
        assert bad.returncode == 2 and "--max-gpus: 'lots' is not a number" in bad.stderr
