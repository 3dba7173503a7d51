"""`cohort job submit --code`, `cohort bundle push`, `cohort artifact list` and
`cohort artifact download`, run as the installed command against a real api process
(PostgreSQL; a directory store or a real S3 server)."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from cli.stack import Stack
from cohort.bundles import pack
from cohort.client import Client
from services.settings import get_settings
from services.storage import keys
from services.storage.store import open_store
from tests.conftest import create_database, drop_database, redis_url
from tests.e2e.conftest import free_port
from tests.s3server import CREDENTIALS

# COHORT_BOOTSTRAP_TOKEN: an admin token needs at least 32 characters.
CLI_TOKEN = "cli-bootstrap-token-for-tests-only"

COHORT = str(Path(sys.executable).parent / "cohort")


@contextmanager
def api_process(tmp_path: Path, **server: str) -> Iterator[tuple[Client, dict[str, str]]]:
    """The api process alone (no scheduler, no agent: jobs stay queued), and the
    environment a user's shell would have to reach it."""
    name = f"cohort_cli_{free_port()}"
    url = create_database(name)
    stack = Stack(
        {
            "COHORT_DATABASE_URL": url,
            "COHORT_REDIS_URL": redis_url("code"),
            "COHORT_DATA_DIR": str(tmp_path / "server"),
            "COHORT_ARTIFACT_URL": str(tmp_path / "store"),
            "COHORT_API_PORT": str(free_port()),
            "COHORT_BOOTSTRAP_TOKEN": CLI_TOKEN,
            **server,
        },
        quiet=True,
    )
    stack.start(parts=("api",))
    user = {key: value for key, value in os.environ.items() if not key.startswith("COHORT_")}
    user |= {
        "COHORT_URL": stack.url,
        "COHORT_TOKEN": stack.token,
        "COHORT_DATA_DIR": str(tmp_path / "client"),
        "COLUMNS": "200",
    }
    try:
        yield Client(stack.url, stack.token), user
    finally:
        stack.stop()
        drop_database(name)


@pytest.fixture(params=["local", "s3"])
def api(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Client, dict[str, str]]]:
    """The api on a directory store, or on a real S3 server (moto) by URL and endpoint;
    this process's environment names the same store, for open_store() in the tests."""
    server = {}
    if request.param == "s3":
        server = {
            "COHORT_ARTIFACT_URL": f"s3://cohort-test/cli-{uuid.uuid4().hex[:8]}",
            "COHORT_ARTIFACT_ENDPOINT_URL": request.getfixturevalue("s3_endpoint"),
            **CREDENTIALS,
        }
    for name, value in {"COHORT_ARTIFACT_URL": str(tmp_path / "store"), **server}.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    with api_process(tmp_path, **server) as started:
        yield started
    monkeypatch.undo()
    get_settings.cache_clear()


def cohort(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COHORT, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def code_dir(root: Path) -> Path:
    (root / "data").mkdir(parents=True)
    (root / "train.py").write_text("print('training')\n")
    (root / "data" / "huge.bin").write_bytes(os.urandom(2 * 2**20))
    (root / ".cohortignore").write_text("data/\n")
    return root


def test_submit_with_code_uploads_once_and_the_job_names_the_bundle(
    api: tuple[Client, dict[str, str]], tmp_path: Path
) -> None:
    client, env = api
    code = code_dir(tmp_path / "code")
    spec = tmp_path / "job.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "script",
                "command": ["python", "train.py"],
                "replicas": 1,
                "strategy": "one_device",
            }
        )
    )
    digest = pack(code, tmp_path / "expected.tar.gz").digest
    first = cohort(env, "submit", str(spec), "--code", str(code))
    assert first.returncode == 0, first.stderr
    assert f"uploaded bundle {digest}" in first.stdout
    assert "submitted job" in first.stdout
    job_id = int(first.stdout.split("submitted job ")[1].split()[0])
    assert client.job(job_id)["bundle"] == digest
    assert client.job(job_id)["command"] == ["python", "train.py"]
    second = cohort(env, "submit", str(spec), "--code", str(code))
    assert second.returncode == 0, second.stderr
    assert f"bundle {digest} (2 files" in second.stdout and "already uploaded" in second.stdout
    pushed = cohort(env, "bundle", "push", str(code))
    assert pushed.returncode == 0 and pushed.stdout.strip() == digest


def test_a_bundle_over_the_limit_is_refused_before_uploading(
    api: tuple[Client, dict[str, str]], tmp_path: Path
) -> None:
    client, env = api
    code = code_dir(tmp_path / "code")
    (code / ".cohortignore").unlink()  # the 2 MiB of data goes in now
    refused = cohort({**env, "COHORT_MAX_BUNDLE_BYTES": str(2**20)}, "bundle", "push", str(code))
    assert refused.returncode == 2
    assert "bundle is 2.0 MiB, over the limit of 1.0 MiB" in refused.stderr.replace("\n", " ")
    digest = pack(code, tmp_path / "b.tar.gz").digest
    assert not client.has_bundle(digest)


def test_the_servers_own_limit_answers_413_while_the_body_is_sent(tmp_path: Path) -> None:
    """A server whose limit is lower than the client's: refused from its Content-Length
    (before reading the body), and the CLI says so rather than a broken connection."""
    code = code_dir(tmp_path / "code")
    (code / ".cohortignore").unlink()
    with api_process(tmp_path, COHORT_MAX_BUNDLE_BYTES=str(2**20)) as (client, env):
        refused = cohort(env, "bundle", "push", str(code))
        assert refused.returncode == 2, refused.stdout
        assert "HTTP 413" in refused.stderr and "over the limit of 1 MiB" in refused.stderr
        assert not client.has_bundle(pack(code, tmp_path / "b.tar.gz").digest)
        spool = tmp_path / "server" / "uploads"
        assert not spool.exists() or os.listdir(spool) == []


def test_artifacts_and_download_of_a_file_and_a_directory(
    api: tuple[Client, dict[str, str]], tmp_path: Path
) -> None:
    client, env = api
    job = client.submit({"replicas": 1, "strategy": "one_device"})
    store = open_store()
    model = os.urandom(5000)
    store.put_bytes(f"{keys.model_prefix(job['id'])}/saved_model.pb", model)
    store.put_bytes(f"{keys.model_prefix(job['id'])}/variables/variables.index", b"index")
    listed = cohort(env, "artifacts", str(job["id"]))
    assert listed.returncode == 0, listed.stderr
    assert "model/saved_model.pb" in listed.stdout and "5000" in listed.stdout
    assert hashlib.sha256(model).hexdigest()[:16] in listed.stdout
    out = tmp_path / "out"
    done = cohort(env, "download", str(job["id"]), "model", "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert (out / "model" / "saved_model.pb").read_bytes() == model
    assert (out / "model" / "variables" / "variables.index").read_bytes() == b"index"
    assert sorted(os.listdir(out)) == ["model"]  # no partial file left
    one = cohort(env, "download", str(job["id"]), "model/saved_model.pb", "-o", str(out / "f"))
    assert one.returncode == 0, one.stderr
    assert (out / "f" / "saved_model.pb").read_bytes() == model
    outside = cohort(env, "download", str(job["id"]), "../1/model", "-o", str(out / "x"))
    assert outside.returncode == 2 and "leaves the job" in outside.stderr


def test_a_hostile_download_is_not_unpacked(tmp_path: Path) -> None:
    """The client checks what it unpacks, whatever the server sends."""
    from cli.artifacts import save_artifact

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("../../escaped.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))

    class HostileServer:
        def download(self, job_id: int, path: str, dest: Path, progress: object = None) -> str:  # noqa: ARG002
            dest.write_bytes(buffer.getvalue())
            return "application/gzip"

    import typer

    with pytest.raises(typer.Exit):
        save_artifact(HostileServer(), 1, "model", tmp_path / "out")  # type: ignore[arg-type]
    assert os.listdir(tmp_path / "out") == []
    assert not (tmp_path / "escaped.txt").exists()
