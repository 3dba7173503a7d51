"""A replica that only prints is alive, through the whole stack: its agent beats its
output, and the control plane counts it as progress once the gang has formed. The limits
are set low (4 s) so that the script runs past them several times over: a script that
prints every second succeeds, one whose replica 1 falls silent is failed as hung, the
reason naming what was missing."""

from __future__ import annotations

from pathlib import Path

from tests.e2e.conftest import job_story, pg_stack_with, wait_terminal

LIMITS = {
    "COHORT_STARTUP_TIMEOUT": "4",
    "COHORT_PROGRESS_TIMEOUT": "4",
}

# argv: seconds to run; the replica whose index is argv[2] prints once, then nothing.
SCRIPT = """\
import os, sys, time
seconds, silent = float(sys.argv[1]), int(sys.argv[2])
index = int(os.environ["COHORT_REPLICA_INDEX"])
end = time.time() + seconds
print(f"replica {index} starting", flush=True)
while time.time() < end:
    time.sleep(1)
    if index != silent:
        print(f"replica {index}: still working", flush=True)
"""


def printing_job(seconds: float, silent: int = -1) -> dict[str, object]:
    return {
        "name": "prints-only",
        "command": ["python", "-c", SCRIPT, str(seconds), str(silent)],
        "replicas": 2,
        "restart_policy": "never",
    }


def test_printing_is_progress_and_silence_is_named(tmp_path: Path) -> None:
    with pg_stack_with(tmp_path, LIMITS) as (stack, client):
        talkative = client.submit(printing_job(14))
        silent = client.submit(printing_job(30, silent=1))
        done = wait_terminal(client, talkative["id"], timeout=120)
        assert done["status"] == "succeeded", job_story(client, talkative["id"])
        failed = wait_terminal(client, silent["id"], timeout=120)
        assert failed["status"] == "failed", job_story(client, silent["id"])
        assert "replica 1" in failed["reason"], failed["reason"]
        assert "hung: no progress for 4s: no output" in failed["reason"], failed["reason"]
