"""The web dashboard in a real browser (Debian's Chromium driven by Playwright) against
the real stack: PostgreSQL, Redis, the api, the scheduler, a Celery agent and
TensorFlow replicas. Screenshots of every page go to test-artifacts/screenshots/."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import expect

from cli.stack import Stack
from cohort.client import Client
from services.statuses import TERMINAL_STATUSES
from tests.capabilities import CHROMIUM, LACKS
from tests.e2e.conftest import wait_for

SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
TIMEOUT_MS = 240_000

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not CHROMIUM.exists(), reason=LACKS + "Debian's chromium (make test installs it)"
    ),
]


@pytest.fixture
def page(browser: Any, pg_stack: tuple[Stack, Client]) -> Iterator[Any]:
    stack, _ = pg_stack
    context = browser.new_context(base_url=stack.url, viewport={"width": 1366, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    # Every page runs under the api's Content Security Policy: nothing it blocks.
    page.on(
        "console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None
    )
    # Everything the dashboard needs ships with it: no request may leave the stack.
    outside: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(stack.url) else outside.append(r.url))
    yield page
    context.close()
    assert not errors, f"JavaScript errors or CSP violations: {errors}"
    assert not outside, f"requests off the stack: {outside}"


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def log_in(page: Any, token: str) -> None:
    page.goto("/")
    page.wait_for_url("**/login?next=/")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url("**/")
    page.get_by_role("heading", name="Jobs").wait_for()


def job_status(page: Any) -> str:
    return page.locator("#job-status").inner_text().strip()


def stored_log_lines(client: Client, job_id: int) -> list[str]:
    """The job's stored log lines as the viewer shows them, sorted."""
    return sorted(
        f"[a{line['attempt']} r{line['replica']}] {line['line']}"
        for line in client.logs(job_id, limit=100_000)
    )


def test_log_in_submit_a_job_watch_it_train_and_succeed(
    page: Any, pg_stack: tuple[Stack, Client]
) -> None:
    stack, client = pg_stack
    # A wrong token: refused, the reason next to the field.
    page.goto("/")
    page.wait_for_url("**/login?next=/")
    page.get_by_label("API token").fill("not-the-token")
    page.get_by_role("button", name="Log in").click()
    assert "unknown token" in page.locator("#token-error").inner_text()
    shot(page, "login")
    log_in(page, stack.token)

    # A validation error shows next to its field, and nothing is stored.
    page.get_by_label("Name", exact=True).fill("ui-digits")
    page.get_by_label("Replicas").fill("0")
    page.get_by_role("button", name="Submit").click()
    error = page.locator("#j-replicas-error")
    error.wait_for()
    assert "greater than or equal to 1" in error.inner_text()
    assert page.get_by_label("Replicas").get_attribute("aria-invalid") == "true"
    assert client.jobs()["items"] == []
    shot(page, "submit-validation-error")

    # A one-line command goes out as argv, split as a shell splits words (never run by
    # one), without the untouched default trainer; a bundle not uploaded is refused.
    page.get_by_label("Replicas").fill("1")
    command = page.get_by_label("Command (optional, instead of the trainer)")
    command.fill("python train.py --note 'two words")
    page.get_by_role("button", name="Submit").click()
    page.locator("#j-command-error").wait_for()
    assert "no closing '" in page.locator("#j-command-error").inner_text()
    command.fill("python train.py --note 'two words' $HOME")
    page.get_by_label("Code bundle (optional)").fill("sha256:" + "0" * 64)
    with page.expect_request("**/api/v1/jobs") as sent:
        page.get_by_role("button", name="Submit").click()
    body = sent.value.post_data_json
    assert body["command"] == ["python", "train.py", "--note", "two words", "$HOME"]
    assert "trainer" not in body and body["bundle"] == "sha256:" + "0" * 64
    page.locator("#form-error").wait_for()
    assert "not found" in page.locator("#form-error").inner_text()
    assert client.jobs()["items"] == []
    command.fill("")
    page.get_by_label("Code bundle (optional)").fill("")

    # A real 2-replica MultiWorkerMirroredStrategy job, from the form.
    page.get_by_label("Replicas").fill("2")
    page.get_by_label("Epochs").fill("3")
    page.get_by_label("Steps per epoch").fill("100")
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url("**/jobs/*")
    job_id = int(page.url.rsplit("/", 1)[1])
    assert page.get_by_role("heading", name=f"#{job_id} ui-digits").is_visible()

    # Watch the loss chart gain points while the job runs; once it has grown, reload
    # the page (a late viewer: the history read over REST, then the stream from there).
    samples: list[tuple[str, int]] = []
    grown: list[int] = []
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while time.monotonic() < deadline:
        status = job_status(page)
        points = int(page.locator("#chart-loss").get_attribute("data-points") or 0)
        samples.append((status, points))
        if status in TERMINAL_STATUSES:
            break
        live = [p for s, p in samples if s not in TERMINAL_STATUSES and p > 0]
        if not grown and len(set(live)) >= 2:
            grown = live
            page.reload()
            continue
        page.wait_for_timeout(250)
    assert len(set(grown)) >= 2 and grown == sorted(grown), (
        f"the chart did not grow while the job ran: {sorted(set(samples))[-20:]}"
    )
    assert "running" in {s for s, _ in samples}, samples
    assert samples[-1][0] == "succeeded", (samples[-1], client.job(job_id)["reason"])

    # Every step is there: the reloaded page's history and stream miss none; and again
    # on a page opened after the end (the history alone).
    for reloaded in (False, True):
        if reloaded:
            page.reload()
        wait_for(
            lambda: page.locator("#chart-loss").get_attribute("data-points") == "300",
            60,
            "all 300 steps on the loss chart",
        )
        # The log viewer likewise: the tail read at load, then streamed lines, each once.
        wait_for(
            lambda: (
                sorted(page.locator("#logs").inner_text().splitlines())
                == stored_log_lines(client, job_id)
            ),
            60,
            "every log line once in the viewer",
        )
    replicas = page.locator("#job-live table.replicas tbody tr")
    assert replicas.count() == 2
    assert [replicas.nth(i).locator("td").nth(4).inner_text() for i in range(2)] == ["0", "0"]
    assert "all 2 replicas exited 0" in page.locator(".timeline").inner_text()
    # The saved model reached the artifact store before the job succeeded: listed, linked.
    wait_for(
        lambda: page.locator("table.artifacts a:has-text('model/saved_model.pb')").count(),
        30,
        "the saved model among the job's artifacts",
    )
    wait_for(lambda: "cohort: replica" in page.locator("#logs").inner_text(), 60, "log lines")
    page.get_by_label("by epoch").check()
    assert page.locator("#chart-loss").get_attribute("data-points") == "3"
    page.get_by_label("by step").check()
    shot(page, "job")

    # The jobs table, the cluster and the schedules.
    page.get_by_role("link", name="Jobs", exact=True).click()
    row = page.locator(f"tr[data-job-id='{job_id}']")
    assert row.locator(".badge").inner_text() == "succeeded"
    assert row.locator("td[data-label=Loss]").inner_text() != "—"
    shot(page, "jobs")
    page.set_viewport_size({"width": 390, "height": 844})
    shot(page, "jobs-phone")
    page.set_viewport_size({"width": 1366, "height": 900})
    page.get_by_role("link", name="Cluster", exact=True).click()
    node = page.locator("#cluster-live tbody tr").first
    assert "e2e-node" in node.inner_text() and "0 used / " in node.inner_text()
    shot(page, "cluster")
    # A paused schedule (it must not fire during the test) and its page.
    made = httpx.post(
        f"{stack.url}/api/v1/schedules",
        timeout=30,
        headers={"Authorization": f"Bearer {stack.token}"},
        json={
            "name": "nightly-digits",
            "cron": "0 3 * * *",
            "paused": True,
            "job": {"name": "nightly", "replicas": 2},
        },
    )
    on_data = httpx.post(
        f"{stack.url}/api/v1/schedules",
        timeout=30,
        headers={"Authorization": f"Bearer {stack.token}"},
        json={
            "name": "on-new-digits",
            "trigger": {"data": "data/new-digits"},
            "paused": True,
            "job": {"name": "retrain", "replicas": 2},
        },
    )
    page.get_by_role("link", name="Schedules", exact=True).click()
    page.wait_for_selector("#schedules:not([aria-busy])")
    schedules = page.locator("#schedules").inner_text()
    if made.status_code == 404:  # the schedules API is not on this server
        assert "not available" in schedules
    else:
        assert made.status_code == on_data.status_code == 201, made.text + on_data.text
        assert "nightly-digits" in schedules and "cron 0 3 * * *" in schedules
        assert "Not run yet." in schedules
        # A data trigger, and the data version it handled (none: nothing pushed there).
        assert "on new data/new-digits (settled 30s)" in schedules
        assert "none yet" in schedules
    shot(page, "schedules")

    # Resubmit: the same spec as a new job, and its page.
    page.goto(f"/jobs/{job_id}")
    page.get_by_role("button", name="Resubmit").click()
    page.wait_for_url(lambda url: not url.endswith(f"/jobs/{job_id}"))
    again = client.job(int(page.url.rsplit("/", 1)[1]))
    first = client.job(job_id)
    assert again["id"] != job_id and again["name"] == "ui-digits"
    assert again["replicas"] == 2 and again["hyperparameters"] == first["hyperparameters"]
    # The jobs table follows the project's stream: a cancel shows without a reload.
    page.get_by_role("link", name="Jobs", exact=True).click()
    # The page says "live" once its EventSource is open, a moment after the load.
    expect(page.locator("#live-state")).to_have_text("live", timeout=TIMEOUT_MS)
    client.cancel(again["id"])
    wait_for(
        lambda: page.locator(f"tr[data-job-id='{again['id']}'] .badge").inner_text() == "cancelled",
        60,
        "the jobs table to show the cancel",
    )


def test_cancel_a_running_job_from_its_page(page: Any, pg_stack: tuple[Stack, Client]) -> None:
    stack, client = pg_stack
    # This page gets no SSE streams (as on a server without them): it must poll instead.
    page.route("**/api/v1/**stream*", lambda route: route.fulfill(status=404, body="{}"))
    log_in(page, stack.token)
    job = client.submit(
        {
            "name": "ui-long",
            "strategy": "one_device",
            "replicas": 1,
            "hyperparameters": {"epochs": 10_000, "steps_per_epoch": 20},
        }
    )
    # The jobs table shows the new job, then its start, without a reload.
    row = page.locator(f"tr[data-job-id='{job['id']}'] .badge")
    wait_for(
        lambda: row.count() and row.inner_text() == "running",
        TIMEOUT_MS / 1000,
        "the jobs table to show the job running",
    )
    expect(page.locator("#live-state")).to_have_text("polling", timeout=TIMEOUT_MS)
    page.get_by_role("link", name=f"#{job['id']} ui-long").click()
    page.wait_for_url(f"**/jobs/{job['id']}")
    wait_for(lambda: job_status(page) == "running", TIMEOUT_MS / 1000, "the job to run")
    wait_for(
        lambda: int(page.locator("#chart-loss").get_attribute("data-points") or 0) > 0,
        60,
        "the first points",
    )

    expect(page.locator("#live-state")).to_have_text("polling", timeout=TIMEOUT_MS)
    cancel = page.get_by_role("button", name="Cancel job")
    cancel.click()  # arms it
    assert client.job(job["id"])["status"] == "running"
    page.get_by_role("button", name="Click again to cancel").click()
    wait_for(lambda: job_status(page) == "cancelled", 60, "the page to show cancelled")
    assert not cancel.is_visible()
    assert "cancelled by user" in page.locator(".timeline").inner_text()
    wait_for(
        lambda: all(r["status"] == "stopped" for r in client.job(job["id"])["replica_list"]),
        120,
        "the replica to stop",
    )
    # The page follows the replica to its end without a reload.
    wait_for(
        lambda: page.locator("#job-live tbody .badge").inner_text() == "stopped",
        30,
        "the page to show the replica stopped",
    )
    shot(page, "job-cancelled")
