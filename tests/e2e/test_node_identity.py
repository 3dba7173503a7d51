"""Two agents of one node on one DATA_DIR: the second stops before it does anything.

Started twice by hand, or by two supervisors, the second would take the first one's
replicas for leftovers of a predecessor (they carry the same marks: node id and DATA_DIR)
and end them (workers/node/leftovers.py). It holds its node's lock on the directory first
(workers/node/data_dir_lock.py)."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import job_story, wait_for, wait_terminal
from tests.e2e.stepper import stepping_job
from tests.faults.nothing_lost import assert_nothing_lost

pytestmark = [pytest.mark.e2e]


def test_a_second_agent_of_a_node_on_its_data_dir_stops_and_spares_the_first_ones_replicas(
    pg_stack,
) -> None:  # type: ignore[no-untyped-def]
    stack, client = pg_stack
    job = client.submit(stepping_job(150, 0.05, name="spared", replicas=1))  # ~8 s
    wait_for(lambda: client.job(job["id"])["status"] == "running", 60, "the job to run")

    twin = stack.add_agent("e2e-node", 1)  # the stack's own node id and DATA_DIR
    assert twin.wait(timeout=60) == 1
    log = (stack.log_dir / "agent-e2e-node.log").read_text(errors="replace")
    assert "is in use by another agent of node e2e-node" in log, log[-2000:]
    assert "Traceback" not in log, log[-2000:]  # one line that says what to fix

    final = wait_terminal(client, job["id"])
    assert final["status"] == "succeeded" and final["attempt"] == 1, job_story(client, job["id"])
    assert_nothing_lost(stack, job["id"])  # the twin touched nothing of the first one's
    # The first agent goes on: another node id on the same DATA_DIR is not refused.
    other = stack.add_agent("e2e-other", 1)
    wait_for(
        lambda: any(n["id"] == "e2e-other" and n["status"] == "ready" for n in client.nodes()),
        60,
        "a second node on the same DATA_DIR",
        explain=lambda: (stack.log_dir / "agent-e2e-other.log").read_text()[-2000:],
    )
    assert other.poll() is None
