"""`cohort run` and `cohort job submit --code` against the api (its app in this process,
on PostgreSQL and a directory store): the spec is checked before any code is packed or
sent, and a command line becomes the job a spec file would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session
from typer.testing import CliRunner

import cohort.client
from cli.main import app
from services.models import Bundle, Job
from services.settings import get_settings


@pytest.fixture
def sent(
    client: TestClient, token: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[str]]:
    """The CLI talking to the test's app; yields the requests it sent ("METHOD path")."""
    requests: list[str] = []
    real = httpx.Client

    def recorded(**kwargs: Any) -> httpx.Client:
        def log(request: httpx.Request) -> None:
            requests.append(f"{request.method} {request.url.path}")

        return real(transport=client._transport, event_hooks={"request": [log]}, **kwargs)

    monkeypatch.setattr(cohort.client.httpx, "Client", recorded)
    monkeypatch.setenv("COHORT_URL", "http://testserver")
    monkeypatch.setenv("COHORT_TOKEN", token)
    monkeypatch.setenv("COHORT_ARTIFACT_URL", str(tmp_path / "store"))
    get_settings.cache_clear()
    yield requests
    monkeypatch.undo()
    get_settings.cache_clear()


@pytest.fixture
def code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A code directory holding train.py, the current directory."""
    root = tmp_path / "code"
    root.mkdir()
    (root / "train.py").write_text("print('training')\n")
    monkeypatch.chdir(root)
    return root


def rows(session: Session, model: type) -> list[Any]:
    return list(session.execute(sa.select(model)).scalars())


@pytest.mark.usefixtures("code")
def test_a_misspelt_field_fails_before_anything_is_packed_or_sent(
    sent: list[str], session: Session, tmp_path: Path
) -> None:
    result = CliRunner().invoke(app, ["run", "--set", "replica=2", "--", "python", "train.py"])
    assert result.exit_code == 2, result.output
    assert "unknown field `replica`: did you mean `replicas`?" in result.stderr
    assert sent == ["POST /api/v1/validate/job"]
    assert rows(session, Bundle) == [] and rows(session, Job) == []
    assert [p for p in (tmp_path / "store").rglob("*") if p.is_file()] == []


def test_job_submit_with_code_checks_the_spec_first(
    sent: list[str], code: Path, session: Session, tmp_path: Path
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("command: [python, train.py]\nstrategy: one_device\nreplicas: 1\nprioity: 3\n")
    result = CliRunner().invoke(app, ["job", "submit", str(spec), "--code", str(code)])
    assert result.exit_code == 2, result.output
    assert "unknown field `prioity`: did you mean `priority`?" in result.stderr
    assert sent == ["POST /api/v1/validate/job"]
    assert rows(session, Bundle) == [] and rows(session, Job) == []


@pytest.mark.usefixtures("code")
def test_run_submits_the_command_with_the_current_directory_as_its_code(
    sent: list[str], session: Session
) -> None:
    argv = ["run", "--replicas", "1", "--strategy", "one_device"]
    argv += ["--set", "env.RETRIES=3", "--set", "hyperparameters.learning_rate=0.1"]
    argv += ["--set", "restart_policy=on_failure", "--set", "max_restarts=2"]
    result = CliRunner().invoke(app, [*argv, "--", "python", "train.py", "--epochs", "3"])
    assert result.exit_code == 0, result.output
    assert "train.py is in the current directory" in result.stdout
    assert sent[0] == "POST /api/v1/validate/job" and sent[-1] == "POST /api/v1/jobs"
    ((bundle,), (job,)) = rows(session, Bundle), rows(session, Job)
    assert job.bundle == bundle.digest
    assert (job.name, job.command, job.trainer) == (
        "train",
        ["python", "train.py", "--epochs", "3"],
        None,
    )
    assert (job.replicas, job.strategy, job.env) == (1, "one_device", {"RETRIES": "3"})
    assert (job.restart_policy, job.max_restarts) == ("on_failure", 2)
    assert job.hyperparameters["learning_rate"] == 0.1


@pytest.mark.usefixtures("code")
def test_a_command_naming_no_file_here_sends_no_code(sent: list[str], session: Session) -> None:
    result = CliRunner().invoke(app, ["run", "--name", "mod", "--", "python", "-m", "pkg.train"])
    assert result.exit_code == 0, result.output
    assert sent == ["POST /api/v1/jobs"]
    (job,) = rows(session, Job)
    assert (job.name, job.bundle, job.replicas) == ("mod", None, 2)  # the spec's default
