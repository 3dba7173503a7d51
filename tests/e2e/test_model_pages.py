"""The model registry's dashboard pages in a real browser (Chromium driven by Playwright)
against the real stack: a TensorFlow job's model registered twice, `production` moved and
rolled back; the menu leads to the models, a model's page shows its versions' lineage and
the alias's moves, and a version's job link opens the job's page. Screenshots go to
test-artifacts/screenshots/ (models.png, model.png)."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from cli.stack import Stack
from cohort.client import Client
from tests.e2e.conftest import wait_terminal
from tests.e2e.test_dashboard import log_in, page, shot  # noqa: F401 - `page` is a fixture
from tests.e2e.test_models import TINY

pytestmark = [pytest.mark.e2e]


def test_the_models_pages_show_versions_lineage_and_the_alias_history(
    page: Any,  # noqa: F811 - the fixture
    pg_stack: tuple[Stack, Client],
) -> None:
    stack, client = pg_stack
    job = client.submit({**TINY, "name": "digits-browser"})
    assert wait_terminal(client, job.id, timeout=300)["status"] == "succeeded"
    client.register_version("digits", job.id)
    client.register_version("digits", job.id)
    client.move_alias("digits", "production", 2, reason="first release")
    client.move_alias("digits", "production", 1, reason="rollback: v2 under review")

    log_in(page, stack.token)
    page.get_by_role("link", name="Models").click()
    page.wait_for_url("**/models")
    expect(page.get_by_role("link", name="digits")).to_be_visible()
    expect(page.get_by_text("production → v1")).to_be_visible()
    shot(page, "models")

    page.get_by_role("link", name="digits").click()
    page.wait_for_url("**/models/digits")
    expect(page.get_by_role("heading", name="production → v1")).to_be_visible()
    history = page.locator("table.alias-history tbody tr")
    expect(history).to_have_count(2)
    expect(history.first).to_contain_text("rollback: v2 under review")
    versions = page.locator("table.versions tbody tr")
    expect(versions).to_have_count(2)
    expect(versions.first).to_contain_text("eval_accuracy=")
    shot(page, "model")
    page.locator("#v1").get_by_role("link", name=f"#{job.id}").click()
    page.wait_for_url(f"**/jobs/{job.id}")
    expect(page.get_by_text("digits-browser").first).to_be_visible()
