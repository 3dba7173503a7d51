"""The CLI has one style: every command that prints data takes --json and prints one JSON
document; the old spellings still run, each naming its new one; no group is listed twice.

The commands run against a fake API (an httpx transport answering every call with a
small JSON body), so this checks the CLI's side only: what it prints, not what it asks.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
import yaml
from typer.testing import CliRunner

import cohort.client
from cli.aliases import OLD_SPELLINGS
from cli.main import app

# argv of every command that talks to the API ({spec}, {dir}, {file}: made by the test).
CALLS: dict[tuple[str, ...], list[str]] = {
    ("run",): ["python", "{file}"],  # argv without `--`: --json, after it, is an option
    ("tensorboard",): ["1", "--no-serve", "--logdir", "{dir}"],  # fetch only: no server
    ("job", "submit"): ["{spec}"],
    ("job", "list"): [],
    ("job", "show"): ["1"],
    ("job", "cancel"): ["1"],
    ("job", "logs"): ["1"],
    ("job", "metrics"): ["1"],
    ("sweep", "create"): ["{spec}"],
    ("sweep", "list"): [],
    ("sweep", "show"): ["1"],
    ("sweep", "cancel"): ["1"],
    ("schedule", "list"): [],
    ("schedule", "show"): ["1"],
    ("schedule", "create"): ["{spec}"],
    ("schedule", "update"): ["1", "{spec}"],
    ("schedule", "pause"): ["1"],
    ("schedule", "resume"): ["1"],
    ("schedule", "delete"): ["1"],
    ("schedule", "run"): ["1"],
    ("schedule", "model"): ["1"],
    ("model", "list"): [],
    ("model", "show"): ["digits"],
    ("model", "register"): ["digits", "--job", "1"],
    ("model", "alias"): ["digits", "production", "--version", "1"],
    ("model", "download"): ["digits@production", "-o", "{dir}"],
    ("artifact", "list"): ["1"],
    ("artifact", "download"): ["1", "model", "-o", "{dir}"],
    ("bundle", "push"): ["{dir}"],
    ("data", "push"): ["{file}", "digits/train.csv"],
    ("data", "list"): [],
    ("data", "delete"): ["digits/train.csv"],
    ("node", "list"): [],
    ("node", "drain"): ["node-a", "--reason", "kernel upgrade"],
    ("node", "undrain"): ["node-a"],
    ("quota", "show"): ["default"],
    ("quota", "set"): ["default", "--max-gpus", "2"],
    ("token", "list"): [],
    ("token", "create"): ["--name", "ci", "--scope", "read"],
    ("token", "revoke"): ["1"],
    ("webhook", "create"): ["https://hooks.example.com/x", "--event", "job.succeeded"],
    ("webhook", "list"): [],
    ("webhook", "delete"): ["1"],
    ("webhook", "ping"): ["1"],
    ("webhook", "deliveries"): ["1"],
    ("login",): ["--url", "http://cohort.example", "--token", "coh_test"],
}
NODE: dict[str, Any] = {
    "id": "node-a",
    "address": "10.0.0.1",
    "slots": 2,
    "gpus": 0,
    "free_slots": 2,
    "running_replicas": 0,
    "status": "ready",
    "last_heartbeat": "2026-11-29T18:00:00Z",
    "cordon": "drain",
    "cordon_reason": "kernel upgrade (by admin)",
    "cordoned_at": "2026-11-29T18:00:00Z",
}
ANSWER: dict[str, Any] = {
    "id": 1,
    "items": [],
    "status": "queued",
    "overrides": {},
    "job_id": None,
    "sweep_id": None,
    "outcome": "skipped",
    "reason": "a run is in progress",
}

LOG_LINE = {"id": 1, "seq": 0, "ts": 0.0, "attempt": 1, "replica": 0, "line": "epoch 1"}
# A job as the API answers one (the SDK checks every answer against the API's schemas).
NONE_FIELDS = (
    "trainer bundle image progress_timeout_seconds roles role_placement profile placement "
    "active_deadline_seconds ttl_seconds_after_finished queue_position cluster_queue_position "
    "schedule_id scheduled_for sweep_id trial_index started_at finished_at progress scaling"
)
JOB: dict[str, Any] = {
    **dict.fromkeys(NONE_FIELDS.split()),
    **{"id": 1, "name": "style", "project": "default", "status": "queued", "attempt": 0},
    **{"reason": "", "created_at": "2026-01-01T00:00:00Z", "command": ["python", "t.py"]},
    **{"env": {}, "pip": [], "inputs": {}, "strategy": "one_device", "replicas": 1},
    **{"gpus_per_replica": 0, "distribution": {}, "hyperparameters": {}, "priority": 0},
    **{"restart_policy": "never", "max_restarts": 0, "requirements": [], "replica_list": []},
    **{"requirements_count": 0, "requirements_digest": ""},
}

WEBHOOK = {
    **{"id": 1, "project": "default", "url": "https://hooks.example.com/x", "note": ""},
    **{"events": ["job.succeeded"], "created_at": "2026-01-01T00:00:00Z"},
    **{"pending": 0, "failed": 0, "secret": "whsec_x"},
}
DELIVERY = {
    **{"id": "d1", "event": "ping", "state": "pending", "created_at": "2026-01-01T00:00:00Z"},
    **{"next_attempt_at": None, "finished_at": None, "attempts": []},
}


AT = "2026-01-01T00:00:00Z"
ALIAS = {"name": "production", "version": 1, "updated_by": "token ci (id 1)", "updated_at": AT}
VERSION = {
    "model": "digits",
    "version": 1,
    "job_id": 1,
    "artifact": "jobs/1/model",
    "lineage": {"job_id": 1, "job_name": "style", "attempt": 1, "metrics": {"loss": 0.1}},
    "aliases": ["production"],
    "registered_by": "token ci (id 1)",
    "registered_at": AT,
}
MODEL = {"name": "digits", "latest_version": 1, "aliases": [ALIAS], "created_at": AT}


def fake_registry(request: httpx.Request) -> httpx.Response:
    """The model registry's answers (the SDK checks their shapes)."""
    path = request.url.path
    if path.endswith("/files/download"):  # all of a version: a .tar.gz
        packed = io.BytesIO()
        with tarfile.open(fileobj=packed, mode="w:gz") as archive:
            info = tarfile.TarInfo("saved_model.pb")
            info.size = 7
            archive.addfile(info, io.BytesIO(b"weights"))
        headers = {"content-type": "application/gzip"}
        return httpx.Response(200, content=packed.getvalue(), headers=headers)
    if path == "/api/v1/models":
        return httpx.Response(200, json={"items": [{**MODEL, "updated_at": AT}]})
    if "/aliases/" in path:
        return httpx.Response(200, json=ALIAS)
    if "/versions" in path:
        return httpx.Response(200, json=VERSION)
    return httpx.Response(200, json={**MODEL, "updated_at": AT, "versions": [VERSION]})


def fake_api(request: httpx.Request) -> httpx.Response:
    path = request.url.path
    if request.method == "HEAD":
        return httpx.Response(404)
    if path.startswith("/api/v1/models"):
        return fake_registry(request)
    if path.endswith("/artifacts/download"):
        return httpx.Response(200, content=b"weights", headers={"content-type": "text/plain"})
    if path.endswith("/logs"):
        return httpx.Response(200, json={"items": [LOG_LINE]})
    if path == "/api/v1/jobs" and request.method == "GET":
        return httpx.Response(200, json={"items": [JOB], "next_cursor": None})
    if path.endswith("/artifacts"):
        return httpx.Response(200, json={"items": []})
    if path.startswith(("/api/v1/jobs", "/api/v1/validate/job")) and "/metrics" not in path:
        return httpx.Response(200, json=JOB)
    if path.startswith("/api/v1/data/") and request.method == "PUT":
        return httpx.Response(200, json={"path": path.removeprefix("/api/v1/data/"), "size": 3})
    if path == "/api/v1/webhooks" and request.method == "POST":
        return httpx.Response(201, json=WEBHOOK)
    if path.endswith("/ping"):
        return httpx.Response(202, json=DELIVERY)
    if path == "/api/v1/nodes":
        return httpx.Response(200, json=[])
    if path.endswith(("/drain", "/undrain")):
        return httpx.Response(200, json=NODE)
    if request.method == "DELETE" and "/tokens/" not in path:
        return httpx.Response(204)
    return httpx.Response(200, json=ANSWER)


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    real = httpx.Client

    def client(**kwargs: Any) -> httpx.Client:
        return real(transport=httpx.MockTransport(fake_api), **kwargs)

    monkeypatch.setattr(cohort.client.httpx, "Client", client)
    monkeypatch.setenv("COHORT_TOKEN", "coh_test")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # `cohort login` saves
    return CliRunner()


def client_commands() -> dict[tuple[str, ...], Any]:
    """Every command of the app that takes --token (the API's clients), by its words."""
    found: dict[tuple[str, ...], Any] = {}

    # Typer's own (vendored) click: a group is what has subcommands.
    def walk(command: Any, words: tuple[str, ...]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, (*words, name))
        elif any("--token" in p.opts for p in command.params):
            found[words] = command

    walk(typer.main.get_command(app), ())
    return found


def argv(words: tuple[str, ...], tmp_path: Path) -> list[str]:
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: style\n")
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text("print('hi')\n")
    given = {"{spec}": str(spec), "{dir}": str(code), "{file}": str(code / "train.py")}
    return [*words, *(given.get(arg, arg) for arg in CALLS[words]), "--json"]


def test_every_client_command_is_called_here() -> None:
    assert set(client_commands()) == set(CALLS)


@pytest.mark.parametrize("words", sorted(CALLS), ids=" ".join)
def test_json_everywhere(words: tuple[str, ...], runner: CliRunner, tmp_path: Path) -> None:
    command = client_commands()[words]
    assert any("--json" in p.opts for p in command.params), f"cohort {' '.join(words)}"
    result = runner.invoke(app, argv(words, tmp_path))
    assert result.exit_code == 0, (result.stdout, result.stderr)
    # One JSON document; `job logs`, which can follow, one per line (JSON Lines).
    assert result.stdout.strip()
    for line in result.stdout.splitlines():
        json.loads(line)


@pytest.mark.parametrize("old", sorted(OLD_SPELLINGS), ids=" ".join)
def test_old_spelling_runs_and_names_the_new(
    old: tuple[str, ...], runner: CliRunner, tmp_path: Path
) -> None:
    new = OLD_SPELLINGS[old]
    words = next(w for w in sorted(CALLS) if w[: len(new)] == new)
    current = runner.invoke(app, argv(words, tmp_path))
    before = runner.invoke(app, [*old, *argv(words, tmp_path)[len(new) :]])
    assert before.exit_code == 0, (before.stdout, before.stderr)
    assert before.stdout == current.stdout
    lines = before.stderr.splitlines()
    assert lines == [
        f"cohort: `cohort {' '.join(old)}` is now `cohort {' '.join(new)}`; "
        "the old spelling goes in the next release"
    ]
    assert current.stderr == ""


def test_no_group_under_two_names() -> None:
    top: Any = typer.main.get_command(app)
    shown = {name for name, c in top.commands.items() if not c.hidden}
    groups = {name for name in shown if hasattr(top.commands[name], "commands")}
    for group in groups:
        assert not {f"{group}s", group.removesuffix("s")} - {group} & shown, group
    # The old spellings are no commands of the app: --help and the reference page
    # (generated from the same app) list the new ones alone.
    old_names = {old[0] for old in OLD_SPELLINGS if len(old) == 1}
    assert not old_names & set(top.commands)


LISTINGS = sorted(words for words in CALLS if words[-1] == "list")


def test_every_listing_is_here() -> None:
    assert len(LISTINGS) == 9  # job, sweep, schedule, model, artifact, data, node, token, webhook


@pytest.mark.parametrize("words", LISTINGS, ids=" ".join)
@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_every_listing_prints_json_or_yaml(
    words: tuple[str, ...], fmt: str, runner: CliRunner, tmp_path: Path
) -> None:
    as_json = runner.invoke(app, argv(words, tmp_path))
    result = runner.invoke(app, [*argv(words, tmp_path)[:-1], "--output", fmt])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    loader = json.loads if fmt == "json" else yaml.safe_load
    assert loader(result.stdout) == json.loads(as_json.stdout)


def test_version_and_completion() -> None:
    """As the installed script answers them (completion is named after the program).
    `--show-completion` shows it for the shell it was typed in, found among its parent
    processes: here a bash that stays its parent (a lone command after `-c`, bash would
    exec in its place). Run without one, as from a process whose shell had exited, it
    found none and failed."""
    cohort = str(Path(sys.executable).parent / "cohort")
    version = subprocess.run([cohort, "--version"], capture_output=True, text=True, check=True)
    assert version.stdout == f"cohort {importlib.metadata.version('cohort')}\n"
    shown = subprocess.run(
        ["bash", "-c", f"{shlex.quote(cohort)} --show-completion; exit $?"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "_COHORT_COMPLETE=complete_bash" in shown.stdout
