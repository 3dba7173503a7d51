"""The CLI facing an API that is not there: one line naming the address, exit 2."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

COHORT = shutil.which("cohort", path=str(Path(sys.executable).parent)) or "cohort"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize(
    "argv",
    [["jobs"], ["schedules", "list"], ["sweep", "list"], ["data", "ls"], ["submit", "{spec}"]],
)
def test_an_unreachable_api_is_one_line_and_exit_2(argv: list[str], tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: unreachable\nreplicas: 1\nstrategy: one_device\n")
    argv = [arg.format(spec=spec) for arg in argv]
    url = f"http://127.0.0.1:{_closed_port()}"
    env = {**os.environ, "COHORT_URL": url, "COHORT_TOKEN": "t" * 32, "COLUMNS": "200"}
    done = subprocess.run(
        [COHORT, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2, done.stderr
    assert f"cannot reach {url}/" in done.stderr
    assert "Traceback" not in done.stderr and "ConnectError" not in done.stderr


def test_a_spec_that_is_not_a_mapping_is_refused_in_one_line(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("- just\n- a list\n")
    done = subprocess.run(
        [COHORT, "submit", str(spec), "--url", "http://127.0.0.1:9", "--token", "t" * 32],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 2, done.stderr
    assert "must hold a mapping (a job spec)" in done.stderr
