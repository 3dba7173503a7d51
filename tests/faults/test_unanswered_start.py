"""A start its agent will never act on: the job does not wait `scheduled` for good.

The replica's claim (the SET NX of (job, attempt, replica) that makes a start act once) is
taken under another node's name before node-a's agent reads the start, as a start
delivered to the wrong node, or a claim left from an agent whose start never went through,
would leave it. The agent ignores the start and every copy the scheduler re-sends
("already claimed"), while it heartbeats as ready. Without COHORT_START_ANSWER_TIMEOUT
nothing settles the replica (services/cluster/watchdog.py settle_unanswered_starts)."""

from __future__ import annotations

import pytest

from services.wire.keys import claim_key
from tests.e2e.conftest import job_story, wait_for, wait_terminal
from tests.e2e.stepper import stepping_job
from tests.faults.conftest import event_time, record
from tests.faults.lost_messages import agents_not_consuming, claimed, started_events
from tests.faults.nothing_lost import assert_nothing_lost

pytestmark = [pytest.mark.e2e, pytest.mark.slow(40)]

ANSWER_TIMEOUT = 10  # seconds; the default is 120


def test_a_start_its_agent_never_acts_on_is_lost_and_the_job_restarts(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack(COHORT_START_ANSWER_TIMEOUT=str(ANSWER_TIMEOUT))
    spec = stepping_job(
        40, 0.05, name="unanswered", replicas=1, restart_policy="on_failure", max_restarts=1
    )
    with agents_not_consuming(stack, "agent") as bus:
        job = client.submit(spec)
        wait_for(lambda: client.job(job["id"])["status"] == "scheduled", 4, "the job to be placed")
        # Under another node's name, before the agent reads its start.
        bus.set(claim_key(job["id"], 1, 0), "node-elsewhere")
    wait_for(
        lambda: claimed(stack, "node-a", job["id"]),
        30,
        "the agent to ignore the start for the claim",
    )

    # On the code before, the job waits `scheduled` for good.
    final = wait_terminal(client, job["id"], timeout=90)
    story = job_story(client, job["id"])
    assert final["status"] == "succeeded" and final["attempt"] == 2, story
    scheduled = event_time(client, job["id"], "scheduled", attempt=1)
    restarting = event_time(client, job["id"], "restarting", attempt=1)
    running = event_time(client, job["id"], "running", attempt=2)
    assert scheduled is not None and restarting is not None and running is not None, story
    reason = next(e["reason"] for e in client.events(job["id"]) if e["to_status"] == "restarting")
    assert f"did not start it within {ANSWER_TIMEOUT}s of its placement" in reason, story
    # Not before the timeout (the re-sent starts had their chance), and not long after.
    waited = restarting - scheduled
    assert ANSWER_TIMEOUT <= waited < ANSWER_TIMEOUT + 15, (waited, story)
    # Attempt 1 never ran: one start in all, attempt 2's.
    assert started_events(stack, job["id"]) == [(2, 0)], story
    assert_nothing_lost(stack, job["id"])
    record(
        "a start its agent never acts on (claimed under another node's name)",
        f"declared lost {ANSWER_TIMEOUT} s after placing (COHORT_START_ANSWER_TIMEOUT); "
        "the restart policy placed attempt 2, which ran and succeeded",
        waited,
        running - scheduled,
        "nothing: the attempt never started",
    )
