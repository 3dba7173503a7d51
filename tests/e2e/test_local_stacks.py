"""`cohort up` as a user runs it, twice on one machine, and the CLI run from outside the
checkout: two stacks with no port settings (two DATA_DIRs) both come up on ports of their
own and each runs a command job to success; `cohort login` saves a URL and token that
every later command finds from any directory; a refused token says where it came from."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.stack_ports import FIRST_RANGE, RANGE_WIDTH
from cohort.client import Client
from tests.e2e.conftest import wait_for, wait_terminal

pytestmark = pytest.mark.e2e

COHORT = str(Path(sys.executable).parent / "cohort")
STOP_WITHIN = 30  # seconds from Ctrl-C to `cohort up` gone, its whole stack stopped
STEP = (
    "import time\nfor step in range(3):\n    print('step', step, flush=True)\n    time.sleep(0.1)\n"
)


def user_env(home: Path, **extra: str) -> dict[str, str]:
    """A user's shell: no COHORT_* settings, a HOME of its own (its ~/.config/cohort)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COHORT_", "XDG_"))}
    return env | {"HOME": str(home), "COLUMNS": "200", **extra}


@contextlib.contextmanager
def cohort_up(root: Path) -> Iterator[tuple[Client, Path]]:
    """`cohort up` on DATA_DIR root/var, for the user whose HOME is root/home."""
    home = root / "home"
    home.mkdir(parents=True)
    log = (root / "up.log").open("wb")
    process = subprocess.Popen(
        [COHORT, "up"],
        cwd=root,
        env=user_env(home, COHORT_DATA_DIR=str(root / "var")),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # As from a terminal, where Ctrl-C reaches it: a job a non-interactive shell starts
        # in the background (CI's `make test`) inherits SIGINT ignored, and so would this.
        preexec_fn=_ctrl_c_as_in_a_terminal,  # noqa: PLW1509 - one call, no lock taken
    )
    config = home / ".config" / "cohort" / "config.json"
    try:

        def up() -> bool:
            assert process.poll() is None, (root / "up.log").read_text()
            return "Cohort is up" in (root / "up.log").read_text() and config.is_file()

        wait_for(up, 90, "cohort up", explain=lambda: (root / "up.log").read_text())
        saved = json.loads(config.read_text())
        yield Client(saved["url"], saved["token"]), home
    finally:
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C
        try:
            stopped = process.wait(timeout=STOP_WITHIN)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            stopped = None
        log.close()
    up_log = (root / "up.log").read_text()
    assert stopped == 0, f"cohort up did not stop on Ctrl-C within {STOP_WITHIN}s:\n{up_log}"
    assert "stopping" in up_log


def _ctrl_c_as_in_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli(home: Path, *argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """The installed `cohort`, run from / (outside any checkout) as that user."""
    return subprocess.run(
        [COHORT, *argv],
        cwd="/",
        env=user_env(home, **extra),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_step_job(home: Path, client: Client, code: Path) -> int:
    """A command job submitted with `cohort submit --code` as that user; its port."""
    spec = code.parent / "job.json"
    spec.write_text(
        json.dumps(
            {
                "name": "steps",
                "command": ["python", "step.py"],
                "replicas": 1,
                "strategy": "one_device",
            }
        )
    )
    done = cli(home, "submit", str(spec), "--code", str(code))
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = int(done.stdout.split("submitted job ")[1].split()[0])
    final = wait_terminal(client, job_id, timeout=90)
    assert final["status"] == "succeeded", final["reason"]
    return int(final["replica_list"][0]["address"].rsplit(":", 1)[1])


def test_two_stacks_side_by_side_take_ports_of_their_own_and_both_run_jobs(
    tmp_path: Path,
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "step.py").write_text(STEP)
    with cohort_up(tmp_path / "a") as (a, home_a), cohort_up(tmp_path / "b") as (b, home_b):
        assert a.base_url != b.base_url
        redis_ports = {(tmp_path / side / "var" / "redis-port").read_text() for side in "ab"}
        assert len(redis_ports) == 2  # two embedded Redis servers
        port_a = run_step_job(home_a, a, code)
        port_b = run_step_job(home_b, b, code)
        # Replica ports from ranges of 500 of their own (cli/stack_ports.py).
        ranges = {(port - FIRST_RANGE) // RANGE_WIDTH for port in (port_a, port_b)}
        assert len(ranges) == 2, (port_a, port_b)


def test_login_from_outside_the_checkout_then_every_command_finds_the_stack(
    tmp_path: Path,
) -> None:
    with cohort_up(tmp_path / "stack") as (stack, _home):
        assert stack.http.headers["Authorization"].startswith("Bearer ")
        token = stack.http.headers["Authorization"].removeprefix("Bearer ")
        someone = tmp_path / "someone"
        someone.mkdir()
        # No config: the default address, and no token to send.
        assert cli(someone, "job", "list").returncode == 2
        done = cli(someone, "login", "--url", stack.base_url, "--token", token)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "project 'default'" in done.stdout
        listed = cli(someone, "job", "list", "--json")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert json.loads(listed.stdout)["items"] == []

        refused = cli(someone, "job", "list", COHORT_TOKEN="coh_not-a-real-token-at-all")
        assert refused.returncode == 2
        message = " ".join(refused.stderr.split())
        assert "HTTP 401" in message
        assert "the token from COHORT_TOKEN was refused: run `cohort login`" in message

        bad_login = cli(someone, "login", "--url", stack.base_url, "--token", "coh_wrong")
        assert bad_login.returncode == 2 and "HTTP 401" in bad_login.stderr
        saved = json.loads((someone / ".config" / "cohort" / "config.json").read_text())
        assert saved["token"] == token  # a refused token is never saved
