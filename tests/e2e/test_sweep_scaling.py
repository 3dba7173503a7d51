"""End to end: the scaling recipe, a sweep over `replicas: [1, 2]` of real TensorFlow
trials, followed live by the installed `cohort sweep show ID --follow` (on a terminal and
piped); the 2-replica trial's scaling report is measured against the 1-replica one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.stack import Stack
from cohort.client import Client
from tests.capabilities import CHROMIUM, need_chromium
from tests.e2e.conftest import pg_stack_with
from tests.e2e.test_sweeps import wait_ended

pytestmark = pytest.mark.e2e

SWEEP_YAML = """\
name: scaling
template:
  trainer: mlp_digits
  strategy: multi_worker_mirrored
  hyperparameters: {epochs: 1, steps_per_epoch: 30}
space:
  grid: {replicas: [1, 2]}
max_concurrent: 2
objective: {metric: eval_accuracy, mode: max}
"""
COHORT = str(Path(sys.executable).parent / "cohort")  # the installed console script
SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def cohort_follow(
    stack: Stack, sweep_id: int, *, terminal: bool
) -> tuple[subprocess.Popen[bytes], list[bytes]]:
    """`cohort sweep show ID --follow` as a user runs it: on a pseudo-terminal, or piped.
    Returns the process and the list its output is collected into."""
    env = {**os.environ, "COHORT_URL": stack.url, "COHORT_TOKEN": stack.token, "COLUMNS": "160"}
    command = [COHORT, "sweep", "show", str(sweep_id), "--follow"]
    chunks: list[bytes] = []
    if not terminal:
        process = subprocess.Popen(
            command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        assert process.stdout is not None
        stream = process.stdout
        threading.Thread(target=lambda: chunks.extend(stream), daemon=True).start()
        return process, chunks
    primary, secondary = os.openpty()
    process = subprocess.Popen(
        command, env=env, stdout=secondary, stderr=secondary, stdin=subprocess.DEVNULL
    )
    os.close(secondary)

    def read() -> None:
        try:
            while data := os.read(primary, 4096):
                chunks.append(data)
        except OSError:  # EIO: the command exited and closed its side
            pass
        finally:
            os.close(primary)

    threading.Thread(target=read, daemon=True).start()
    return process, chunks


@pytest.fixture
def three_slots(tmp_path: Path) -> Iterator[tuple[Stack, Client]]:
    """The stack with an agent of 3 slots: both trials at once, to keep the test short
    (the figures are not what it checks; a real measurement runs one trial at a time)."""
    with pg_stack_with(tmp_path, {"COHORT_NODE_SLOTS": "3"}) as stack:
        yield stack


def test_a_sweep_over_replicas_yields_a_scaling_report_followed_live(
    three_slots: tuple[Stack, Client], tmp_path: Path
) -> None:
    stack, client = three_slots
    spec = tmp_path / "scaling.yaml"
    spec.write_text(SWEEP_YAML)
    env = {**os.environ, "COHORT_URL": stack.url, "COHORT_TOKEN": stack.token}
    created = subprocess.run(
        [COHORT, "sweep", "create", str(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    sweep_id = int(re.search(r"sweep (\d+) created", created.stdout).group(1))
    live, live_out = cohort_follow(stack, sweep_id, terminal=True)
    piped, piped_out = cohort_follow(stack, sweep_id, terminal=False)

    sweep = wait_ended(client, sweep_id)
    assert sweep["status"] == "succeeded", sweep["reason"]
    assert live.wait(timeout=30) == 0 and piped.wait(timeout=30) == 0
    # In GridSampler's order (the 2-replica trial first): the trial with each count.
    one, two = sorted(sweep["trials"], key=lambda t: t["parameters"]["replicas"])
    assert (one["parameters"], two["parameters"]) == ({"replicas": 1}, {"replicas": 2})

    # On a terminal: the table redrawn in place while the trials ran, ending succeeded.
    screen = ANSI.sub("", b"".join(live_out).decode(errors="replace"))
    assert screen.count(f"sweep {sweep_id} scaling: ") >= 2, screen
    assert f"sweep {sweep_id} scaling: running" in screen
    assert f"sweep {sweep_id} scaling: succeeded" in screen
    assert "\x1b[" in b"".join(live_out).decode(errors="replace")  # it did draw in place
    # Piped: a line per change of each trial, then the final table; no cursor codes.
    text = b"".join(piped_out).decode()
    assert "\x1b[" not in text
    for trial in (one, two):
        assert (
            f"trial {trial['index']} (job {trial['job_id']}): succeeded, eval_accuracy " in text
        ), text
    assert text.rstrip().count("succeeded") >= 4  # 2 lines, the header, the table rows

    # The recipe: the 2-replica trial against the 1-replica one of the same sweep.
    scaling = client.job(two["job_id"])["scaling"]
    assert scaling["baseline_job_id"] == one["job_id"], scaling
    assert scaling["total_examples_per_second"] > 0 and scaling["efficiency"] > 0
    assert client.job(one["job_id"])["scaling"]["efficiency"] is None
    need_chromium()  # the CLI's part has passed; the pages need the browser
    check_pages_in_a_browser(stack, sweep, two["job_id"])


def check_pages_in_a_browser(stack: Stack, sweep: dict[str, object], job_id: int) -> None:
    """The sweep's page in Chromium: one chart line per trial, sorting by the objective,
    no script error or CSP violation, nothing fetched off the stack; the 2-replica trial's
    page shows its scaling report."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(base_url=stack.url, viewport={"width": 1366, "height": 900})
        errors: list[str] = []
        outside: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on(
            "console",
            lambda m: (
                errors.append(m.text)  # a CSP violation
                if "Content Security Policy" in m.text
                else None
            ),
        )
        page.on("request", lambda r: None if r.url.startswith(stack.url) else outside.append(r.url))
        page.goto(f"/login?next=/sweeps/{sweep['id']}")
        page.get_by_label("API token").fill(stack.token)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"**/sweeps/{sweep['id']}")
        page.locator("#chart-objective canvas").first.wait_for()
        legend = page.locator("#chart-objective .u-legend").inner_text()
        assert "trial 0" in legend and "trial 1" in legend and "(best)" in legend, legend
        page.get_by_role("link", name="eval_accuracy (max)").click()
        page.wait_for_url("**sort=objective")
        first = page.locator("table.trials tbody tr").first.get_attribute("data-job-id")
        assert first == str(sweep["best_job_id"])
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "sweep.png"), full_page=True)
        page.goto(f"/jobs/{job_id}")
        assert "efficiency" in page.locator("#scaling").inner_text()
        browser.close()
    assert not errors and not outside, (errors, outside)
