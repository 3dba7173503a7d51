"""End to end: webhooks through the real stack (api, scheduler, agent processes) to a real
HTTP receiver on 127.0.0.1 (allowed by COHORT_WEBHOOK_ALLOWED_NETWORKS, as a cluster's
admin would): a real TensorFlow job's success arrives once, signed; a receiver that is
down, then failing, then up gets every event after, under the same ids; another
project's events never reach a webhook; a hanging receiver does not slow scheduling; with
two schedulers and the leader killed, every delivery still arrives, at least once, under
one id each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli.stack import Stack
from cohort.client import Client
from tests.conftest import reachable_dir
from tests.e2e.conftest import free_port, pg_stack_with, wait_for, wait_terminal
from tests.e2e.stepper import stepping_job
from tests.faults.nothing_lost import assert_nothing_lost
from tests.services.test_webhook_delivery import documented_verify
from tests.webhook_receiver import Receiver

pytestmark = pytest.mark.e2e

ENV = {
    "COHORT_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.1/32",
    "COHORT_WEBHOOK_DELIVERY_INTERVAL": "0.2",
    "COHORT_WEBHOOK_FIRST_RETRY": "0.5",
    "COHORT_WEBHOOK_TIMEOUT": "2",
}
ENDED = ["job.succeeded", "job.failed", "job.cancelled"]
TF_JOB = {
    "name": "hooked-digits",
    "trainer": "mlp_digits",
    "strategy": "one_device",
    "replicas": 1,
    "hyperparameters": {"epochs": 1, "steps_per_epoch": 10},
}


@pytest.fixture(scope="module")
def stack(replicas_tmp_root: Path) -> Iterator[tuple[Stack, Client]]:
    """One stack for the module's tests, each with a receiver and webhook of its own."""
    data_dir = reachable_dir(replicas_tmp_root, "webhooks-")
    env = {**ENV, "COHORT_REDIS_URL": "", "COHORT_EMBEDDED_REDIS_PORT": str(free_port())}
    with pg_stack_with(data_dir, env) as running:
        yield running


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hook = Receiver().up()
    yield hook
    hook.stop_hanging()
    hook.down()


def project_client(stack: Stack, client: Client, project: str) -> Client:
    """An admin client of another project (its token issued by the bootstrap admin)."""
    issued = client.request(
        "POST", "/api/v1/tokens", {"project": project, "name": "hooks", "scopes": ["admin"]}
    )
    return Client(stack.url, issued["token"])


def by_id(receiver: Receiver) -> dict[str, list[Any]]:
    seen: dict[str, list[Any]] = {}
    for got in receiver.bodies():
        seen.setdefault(got.headers["Cohort-Webhook-Id"], []).append(got)
    return seen


def test_a_tensorflow_jobs_success_arrives_once_signed(
    stack: tuple[Stack, Client], receiver: Receiver
) -> None:
    _, client = stack
    hook = client.create_webhook(receiver.url, ENDED)
    job = client.submit(TF_JOB)
    assert wait_terminal(client, job["id"], timeout=240)["status"] == "succeeded"
    wait_for(lambda: receiver.bodies(), 30, "the job's event")
    time.sleep(2)  # rounds go on: nothing more may arrive for it
    [got] = receiver.bodies()
    assert documented_verify()(hook.secret, got.headers, got.body)
    body = got.json
    assert body["event"] == "job.succeeded" and body["project"] == "default"
    assert body["data"]["job"]["id"] == job["id"] and body["data"]["job"]["status"] == "succeeded"
    [delivery] = client.webhook_deliveries(hook.id)
    assert (delivery.id, delivery.state) == (body["id"], "delivered")
    assert [a.status_code for a in delivery.attempts] == [200]
    client.delete_webhook(hook.id)


def test_a_receiver_down_then_failing_gets_every_event_when_back_under_the_same_ids(
    stack: tuple[Stack, Client], receiver: Receiver
) -> None:
    _, client = stack
    hook = client.create_webhook(receiver.url, ENDED)
    receiver.down()
    jobs = [client.submit(stepping_job(5, name=f"down-{i}")) for i in range(3)]
    for job in jobs:
        wait_terminal(client, job["id"], timeout=120)

    def refused_twice() -> bool:
        listed = client.webhook_deliveries(hook.id)
        return len(listed) == 3 and all(len(d.attempts) >= 2 for d in listed)

    wait_for(refused_twice, 30, "attempts refused while the receiver is down")
    receiver.mode = "error"
    receiver.up()
    wait_for(lambda: len(receiver.bodies()) >= 6, 30, "attempts answered 500")
    receiver.mode = "ok"

    def delivered() -> bool:
        return all(d.state == "delivered" for d in client.webhook_deliveries(hook.id))

    wait_for(delivered, 60, "every delivery once the receiver is back")
    seen = by_id(receiver)
    listed = client.webhook_deliveries(hook.id)
    assert set(seen) == {d.id for d in listed}
    assert {r.json["data"]["job"]["id"] for r in receiver.bodies()} == {j["id"] for j in jobs}
    for delivery in listed:
        copies = seen[delivery.id]
        assert len({c.body for c in copies}) == 1  # the same bytes on every attempt
        codes = [a.status_code for a in delivery.attempts]
        assert codes[0] is None and codes[-1] == 200 and 500 in codes, codes
        assert all(documented_verify()(hook.secret, c.headers, c.body) for c in copies)
    client.delete_webhook(hook.id)


def test_another_projects_events_never_reach_a_webhook(
    stack: tuple[Stack, Client], receiver: Receiver
) -> None:
    running, client = stack
    hook = client.create_webhook(receiver.url, ENDED)
    other = project_client(running, client, "hooks-other")
    their_hook = other.create_webhook(receiver.url.replace("/hook", "/theirs"), ENDED)
    theirs = other.submit(stepping_job(3, name="theirs"))
    ours = client.submit(stepping_job(3, name="ours"))
    for job_id in (theirs["id"], ours["id"]):
        wait_terminal(client if job_id == ours["id"] else other, job_id, timeout=120)
    wait_for(lambda: len(receiver.bodies()) >= 2, 30, "both projects' events")
    time.sleep(1)
    paths = {r.path: r.json for r in receiver.bodies()}
    assert paths["/hook"]["data"]["job"]["id"] == ours["id"]
    assert paths["/theirs"]["data"]["job"]["id"] == theirs["id"]
    assert paths["/theirs"]["project"] == "hooks-other"
    assert len(receiver.bodies()) == 2
    # Neither project's admin sees or touches the other's webhook.
    assert [h.id for h in other.webhooks()] == [their_hook.id]
    assert hook.id not in [h.id for h in other.webhooks()]
    client.delete_webhook(hook.id)
    other.delete_webhook(their_hook.id)


def test_a_hanging_receiver_does_not_slow_scheduling(
    stack: tuple[Stack, Client], receiver: Receiver
) -> None:
    _, client = stack
    receiver.mode = "hang"
    hook = client.create_webhook(receiver.url, ENDED)
    # Events pile up at a receiver that never answers (each attempt waits out the timeout).
    for i in range(4):
        wait_terminal(client, client.submit(stepping_job(2, name=f"hang-{i}"))["id"], 120)
    wait_for(lambda: len(receiver.bodies()) >= 4, 30, "attempts hanging at the receiver")
    started = time.monotonic()
    job = client.submit(stepping_job(2, name="placed-meanwhile"))
    assert wait_terminal(client, job["id"], timeout=60)["status"] == "succeeded"
    took = time.monotonic() - started
    assert took < 15, f"a 2-step job took {took:.1f}s while deliveries hung"
    assert receiver.bodies() and not receiver.release.is_set()  # still hanging meanwhile
    listed = client.webhook_deliveries(hook.id)
    assert all(d.state == "pending" for d in listed)
    client.delete_webhook(hook.id)


def test_two_schedulers_deliver_every_event_at_least_once_under_one_id(
    tmp_path: Path, receiver: Receiver
) -> None:
    env = {**ENV, "COHORT_SCHEDULER_LOCK_TTL": "3", "COHORT_SCHEDULER_INTERVAL": "0.5"}
    with pg_stack_with(tmp_path, env) as (running, client):
        running.add_scheduler("scheduler-2")
        hook = client.create_webhook(receiver.url, ENDED)
        first = [client.submit(stepping_job(3, name=f"two-{i}")) for i in range(4)]
        for job in first:
            wait_terminal(client, job["id"], timeout=120)
        wait_for(lambda: len(by_id(receiver)) >= 4, 30, "the first events")
        running.kill("scheduler")  # the leader dies; the standby takes over
        later = [client.submit(stepping_job(3, name=f"after-{i}")) for i in range(4)]
        for job in later:
            wait_terminal(client, job["id"], timeout=120)

        def all_delivered() -> bool:
            listed = client.webhook_deliveries(hook.id)
            return len(listed) == 8 and all(d.state == "delivered" for d in listed)

        wait_for(all_delivered, 60, "every delivery")
        listed = client.webhook_deliveries(hook.id)
        for job in first + later:  # across the leader's death, as the fault tests check
            assert_nothing_lost(running, job["id"])
    seen = by_id(receiver)
    assert set(seen) == {d.id for d in listed}
    ended = {r.json["data"]["job"]["id"] for r in receiver.bodies()}
    assert ended == {j["id"] for j in first + later}
    for copies in seen.values():  # a repeat, if any, is the same delivery, byte for byte
        assert len({c.body for c in copies}) == 1


def test_an_admin_creates_pings_lists_and_deletes_a_webhook_with_the_cli(
    stack: tuple[Stack, Client], receiver: Receiver
) -> None:
    running, client = stack
    made = cohort(
        running.url,
        running.token,
        "webhook",
        "create",
        receiver.url,
        "--event",
        "job.failed",
        "--event",
        "sweep.ended",
        "--json",
    )
    assert made.returncode == 0, made.stderr
    hook = json.loads(made.stdout)
    assert hook["secret"].startswith("whsec_") and hook["events"] == ["job.failed", "sweep.ended"]
    shown = cohort(
        running.url, running.token, "webhook", "create", receiver.url, "--event", "job.done"
    )
    assert shown.returncode == 2 and "events" in shown.stderr and "job.succeeded" in shown.stderr
    refused = cohort(
        running.url,
        running.token,
        "webhook",
        "create",
        "http://169.254.169.254/",
        "--event",
        "job.failed",
    )
    assert refused.returncode == 2 and "link-local" in refused.stderr

    assert cohort(running.url, running.token, "webhook", "ping", str(hook["id"])).returncode == 0
    wait_for(lambda: receiver.bodies("ping"), 30, "the ping")
    [ping] = receiver.bodies("ping")
    assert documented_verify()(hook["secret"], ping.headers, ping.body)

    def delivered() -> list[Any] | None:
        out = cohort(
            running.url, running.token, "webhook", "deliveries", str(hook["id"]), "--output", "yaml"
        )
        listed = yaml.safe_load(out.stdout)
        return listed if listed and listed[0]["state"] == "delivered" else None

    [listed] = wait_for(delivered, 30, "the ping delivered")
    assert listed["id"] == ping.headers["Cohort-Webhook-Id"]
    assert [a["status_code"] for a in listed["attempts"]] == [200]
    table = cohort(running.url, running.token, "webhook", "list")
    assert receiver.url in table.stdout and "job.failed" in table.stdout
    assert "whsec_" not in table.stdout
    assert cohort(running.url, running.token, "webhook", "delete", str(hook["id"])).returncode == 0
    assert hook["id"] not in [h.id for h in client.webhooks()]


def cohort(url: str, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COHORT_URL": url, "COHORT_TOKEN": token, "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "cli", *args], env=env, capture_output=True, text=True, timeout=60
    )
