"""`cohort up` and `cohort api` refuse a COHORT_BOOTSTRAP_TOKEN under 32 characters before
starting anything, in one line (the api's own check: tests/e2e/test_tokens_cli.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

COHORT = shutil.which("cohort", path=str(Path(sys.executable).parent)) or "cohort"


@pytest.mark.parametrize("command", ["up", "api"])
def test_a_short_bootstrap_token_is_refused_in_one_line(command: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "COHORT_BOOTSTRAP_TOKEN": "x" * 31,
        "COHORT_DATA_DIR": str(tmp_path),
        "COHORT_DATABASE_URL": "",
        "COHORT_REDIS_URL": "",
        "COLUMNS": "200",
    }
    done = subprocess.run(
        [COHORT, command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [
        "cohort: COHORT_BOOTSTRAP_TOKEN is 31 characters; an admin token needs at least 32: "
        "make one with `openssl rand -hex 32`"
    ]
    assert not (tmp_path / "redis").exists()  # nothing was started
