"""A job's input files, fetched by the agent as root, are readable by the job's replicas
and by nobody else's: agent:U 0640 in the agent's `inputs/` (workers/node/prepare.py,
isolation.share_read_only). The store writes them 0600, which left a replica running as
its job's uid unable to read its own data."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.settings import Settings
from services.wire.replica import ReplicaSpec
from workers import layout
from workers.node import isolation
from workers.node.prepare import Preparer

UID_BASE = 1_931_000_000  # COHORT_REPLICA_UID_BASE of these tests alone
READER = "import sys; sys.stdout.write(open(sys.argv[1]).read())"
WRITER = "import sys; open(sys.argv[1], 'a').write('x')"


def run_as(
    user: isolation.ReplicaUser, script: str, path: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, str(path)],
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
        check=False,
        **isolation.popen_options(user),
    )


@pytest.mark.skipif(
    os.geteuid() != 0, reason="replicas run as their job's uid only under a root agent"
)
def test_a_fetched_input_is_readable_by_its_jobs_replicas_only(tmp_path: Path) -> None:
    settings = Settings(
        DATA_DIR=tmp_path / "data",
        ARTIFACT_URL=str(tmp_path / "store"),
        REPLICA_UID_BASE=UID_BASE,
        REPLICA_UID_RANGE=1000,
    )
    from services.storage.store import open_store

    open_store(settings=settings).put_bytes("data/1/rows.csv", b"a,b\n1,2\n")
    job, other = isolation.replica_user(settings, 5), isolation.replica_user(settings, 6)
    assert job is not None and other is not None
    isolation.lay_out(settings.data_dir, 5, 1, 0, job)
    Preparer(settings).prepare(
        ReplicaSpec(
            5,
            1,
            0,
            1,
            None,
            "one_device",
            command=["python", "x.py"],
            inputs={"rows.csv": "data/1/rows.csv"},
        )
    )
    path = layout.input_dir(settings.data_dir, 5) / "rows.csv"

    read = run_as(job, READER, path)
    assert read.returncode == 0, read.stderr
    assert read.stdout == "a,b\n1,2\n"
    assert run_as(job, WRITER, path).returncode != 0  # read-only for the job
    assert "Permission" in run_as(other, READER, path).stderr  # another job's uid: nothing
    assert path.read_bytes() == b"a,b\n1,2\n"
