"""A replica against its node's DATA_DIR, on the default stack (`cohort up`: SQLite and the
embedded Redis under DATA_DIR, the agent as root running each job as a uid of its own).

Project B pushes data and runs a job with a secret in its `env` that writes a checkpoint,
a model and a log line; then project A's job tries every path the node holds under
DATA_DIR (the list a root walk of it made just before), walks DATA_DIR itself, and says
what it could open. It opens its own job's directory and nothing else: not the database
or its WAL, not the keys, the Redis password, the artifacts, the bundle cache, nor B's
job. And DATA_DIR's entries have the modes services/data_dir.py promises."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.stack import Stack
from cohort.client import Client
from tests.e2e.conftest import PORT_BASE, embedded_stack, free_port, wait_for, wait_terminal
from workers import layout

__all__ = ["embedded_stack"]  # the default stack, as `cohort up` runs it

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(os.geteuid() != 0, reason="isolation needs an agent as root"),
]

COHORT = str(Path(sys.executable).parent / "cohort")
SECRET = "b-project-secret-5f2e9c"

WRITER = """import os, pathlib
secret = os.environ["B_SECRET"]
pathlib.Path(os.environ["COHORT_CHECKPOINT_DIR"], "weights.ckpt").write_text("B " + secret)
pathlib.Path(os.environ["COHORT_MODEL_DIR"], "model.txt").write_text("B's model " + secret)
print("B writes its log", secret, flush=True)
"""

# Tries every path it is given and walks DATA_DIR and its own job's directory; writes what
# it could open (a file read, a directory listed) to its work dir, then says it is done.
WALKER = """import json, os, sys
data_dir, own = sys.argv[1], os.environ["COHORT_JOB_DIR"]
opened, refused = [], []

def attempt(path):
    try:
        try:
            os.listdir(path)
        except NotADirectoryError:
            with open(path, "rb") as handle:
                handle.read(1)
        opened.append(path)
    except OSError as exc:
        refused.append([path, type(exc).__name__])

def walk(top):
    for root, dirs, files in os.walk(top, onerror=lambda e: refused.append([e.filename,
                                                                          "walk"])):
        opened.append(root)
        for name in files:
            attempt(os.path.join(root, name))

walk(data_dir)
walk(own)
for path in json.load(open("paths.json")):
    attempt(path)
report = os.path.join(os.environ["COHORT_WORK_DIR"], "reach.json")
with open(report, "w") as handle:
    json.dump({"own": own, "opened": opened, "refused": refused}, handle)
print("REACH-DONE", len(opened), len(refused), flush=True)
"""


def cohort(stack: Stack, token: str, *argv: str) -> str:
    """The installed `cohort` as a project's user runs it; its standard output."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("COHORT_")}
    env |= {"COHORT_URL": stack.url, "COHORT_TOKEN": token}
    done = subprocess.run(
        [COHORT, *argv], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def project_token(stack: Stack, project: str) -> str:
    """A new read+submit token of `project`, issued with the bootstrap (admin) token."""
    created = cohort(
        stack,
        stack.token,
        "tokens",
        "create",
        "--project",
        project,
        "--name",
        "attacker-test",
        "--scope",
        "read",
        "--scope",
        "submit",
        "--json",
    )
    return str(json.loads(created)["token"])


def submit_as(stack: Stack, token: str, tmp_path: Path, spec: dict[str, Any], code: Path) -> int:
    """`cohort job submit job.yaml --code DIR` with a project's token; the job's id."""
    path = tmp_path / f"job-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = cohort(stack, token, "submit", str(path), "--code", str(code), "--json")
    return int(json.loads(out)["id"])


def code_dir(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    for file, text in files.items():
        (directory / file).write_text(text)
    return directory


def every_path(data_dir: Path) -> list[str]:
    """Every directory and file under `data_dir`, as root sees them (links not followed)."""
    found = []
    for root, dirs, files in os.walk(data_dir):
        found += [os.path.join(root, name) for name in (*dirs, *files)]
    return found


def job_spec(name: str, argv: list[str], **more: Any) -> dict[str, Any]:
    return {
        "name": name,
        "command": argv,
        "replicas": 1,
        "strategy": "one_device",
        "restart_policy": "never",
        **more,
    }


def test_a_replica_opens_nothing_of_the_node_but_its_own_job_s_directory(
    embedded_stack: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, _admin = embedded_stack
    data_dir = stack.settings.data_dir
    token_a, token_b = project_token(stack, "alpha"), project_token(stack, "bravo")
    client_b = Client(stack.url, token_b)

    data = tmp_path / "b-data.csv"
    data.write_text(f"x,y\n1,{SECRET}\n")
    cohort(stack, token_b, "data", "push", str(data), "bravo/train.csv")
    job_b = submit_as(
        stack,
        token_b,
        tmp_path,
        job_spec("b-writes", ["python", "write.py"], env={"B_SECRET": SECRET}),
        code_dir(tmp_path, "b-code", {"write.py": WRITER}),
    )
    final = wait_terminal(client_b, job_b)
    assert final["status"] == "succeeded", final["reason"]
    wait_for(
        lambda: any(SECRET in line["line"] for line in client_b.logs(job_b)),
        30,
        "B's log line in the database",
    )
    wait_for(
        lambda: (
            {a["path"] for a in client_b.artifacts(job_b)}
            >= {"checkpoints/weights.ckpt", "model/model.txt"}
        ),
        60,
        "B's artifacts stored",
    )

    # What the node holds now, the secrets' files among it (the attack's target list;
    # the Redis password too: test_embedded_redis.py).
    targets = every_path(data_dir)
    for name in (
        "cohort.db",
        "cohort.db-wal",
        "signing-key",
        "bootstrap-token",
        "artifacts",
        "cache",
        "jobs",
    ):
        assert str(data_dir / name) in targets, name
    assert [p for p in targets if p.startswith(str(data_dir / "cache" / "bundles") + "/")]
    assert [p for p in targets if p.startswith(str(layout.job_dir(data_dir, job_b)) + "/")]

    job_a = submit_as(
        stack,
        token_a,
        tmp_path,
        job_spec("a-walks", ["python", "walk.py", str(data_dir)]),
        code_dir(tmp_path, "a-code", {"walk.py": WALKER, "paths.json": json.dumps(targets)}),
    )
    final = wait_terminal(Client(stack.url, token_a), job_a)
    assert final["status"] == "succeeded", final["reason"]
    report = json.loads((layout.work_dir(data_dir, job_a, 1, 0) / "reach.json").read_text())

    own = str(layout.job_dir(data_dir, job_a))
    assert report["own"] == own
    # It could work in its own directory (else the rest would prove nothing)...
    assert str(layout.work_dir(data_dir, job_a, 1, 0)) in report["opened"]
    # ...and opened nothing outside it: not even a listing of DATA_DIR or jobs/.
    outside = sorted(
        {path for path in report["opened"] if path != own and not path.startswith(own + "/")}
    )
    assert outside == [], f"a replica of project A opened {len(outside)} paths: " + " ".join(
        os.path.relpath(path, data_dir) for path in outside
    )
    assert {path for path, _why in report["refused"]} >= set(targets)
    assert_private_modes(data_dir)
    # What the services create from now on is theirs alone too.
    umasks = {
        name: next(
            line.split()[1]
            for line in Path(f"/proc/{child.pid}/status").read_text().splitlines()
            if line.startswith("Umask:")
        )
        for name, child in stack.children
    }
    assert umasks == dict.fromkeys(("redis", "api", "scheduler", "agent"), "0077")


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


PRIVATE = (
    "cohort.db",
    "cohort.db-wal",
    "cohort.db-shm",
    "signing-key",
    "bootstrap-token",
    "redis-password",
    "artifacts",
    "cache",
    "uploads",
    "logs",
    "redis",
)


def assert_private_modes(data_dir: Path, names: tuple[str, ...] = PRIVATE) -> None:
    """DATA_DIR 0711, and every entry in it but jobs/ (0711) its owner's alone: the
    database and its WAL and shared memory, the keys and the Redis password 0600,
    artifacts/, cache/, uploads/, logs/ and redis/ 0700 (`names` must all be there)."""
    assert mode(data_dir) == 0o711
    assert mode(data_dir / "jobs") == 0o711
    modes = {name: oct(mode(data_dir / name)) for name in names}
    assert modes == {name: oct(0o700 if (data_dir / name).is_dir() else 0o600) for name in names}
    loose = {
        entry.name: oct(mode(Path(entry.path)))
        for entry in os.scandir(data_dir)
        if entry.name != "jobs" and not entry.is_symlink() and mode(Path(entry.path)) & 0o077
    }
    assert loose == {}, loose


def test_a_data_dir_an_older_version_left_open_is_closed_at_start(tmp_path: Path) -> None:
    # As the code before left it (0755 directories, 0644 files, no umask), with a link
    # an operator made to a file elsewhere, which is not DATA_DIR's to change.
    data_dir = tmp_path / "var"
    for directory in (
        data_dir,
        data_dir / "artifacts" / "bundles",
        data_dir / "cache",
        data_dir / "uploads",
        data_dir / "logs",
        data_dir / "redis",
    ):
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o755)
    old_db = sqlite3.connect(data_dir / "cohort.db")
    old_db.execute("PRAGMA journal_mode=WAL")
    old_db.close()
    (data_dir / "signing-key").write_text("ab" * 32 + "\n")
    (data_dir / "artifacts" / "bundles" / "old.tar.gz").write_bytes(b"old")
    elsewhere = tmp_path / "operator-notes.txt"
    elsewhere.write_text("not Cohort's")
    (data_dir / "notes").symlink_to(elsewhere)
    for path in (data_dir / "cohort.db", data_dir / "signing-key", elsewhere):
        path.chmod(0o644)

    stack = Stack(
        {
            "COHORT_DATABASE_URL": "",
            "COHORT_REDIS_URL": "",
            "COHORT_DATA_DIR": str(data_dir),
            "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
            "COHORT_PORT_RANGE_START": PORT_BASE,
            "COHORT_API_PORT": str(free_port()),
        },
        quiet=True,
    )
    stack.start()
    try:
        Client(stack.url, stack.token).nodes()
        assert_private_modes(data_dir)
        assert stack.env["COHORT_SIGNING_KEY"] == "ab" * 32  # kept, only its mode changed
        assert mode(elsewhere) == 0o644 and (data_dir / "notes").is_symlink()
    finally:
        stack.stop()
