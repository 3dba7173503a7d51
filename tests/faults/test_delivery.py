"""At-least-once delivery, a Redis restart mid-job, and an API restart under retried POSTs."""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
import time

import httpx
import pytest

from services.wire.replica import START_TASK, ReplicaSpec, StartReplica
from tests.e2e.conftest import free_port, job_story, wait_for, wait_terminal
from tests.e2e.stepper import stepping_job
from tests.faults.conftest import (
    GANG,
    LONG_JOB,
    LONG_JOB_STEPS,
    event_time,
    past_first_checkpoint,
    record,
    steps_seen,
)
from tests.faults.lost_messages import (
    agent_name,
    agents_not_consuming,
    claimed,
    drop_messages,
    log_of,
    send_start,
    started_events,
)
from tests.faults.nothing_lost import agent_data_dirs, assert_nothing_lost
from tests.faults.processes import attempt_processes
from workers import layout

pytestmark = [pytest.mark.e2e, pytest.mark.slow(100)]


def test_lost_repeated_and_stale_start_messages_start_each_replica_once(
    make_stack, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack()
    # Steppers (tests/e2e/stepper.py) for 10 s: what is tested is who starts them.
    spec = stepping_job(200, 0.05, name="delivered", **GANG)

    # Lost: the gang's start messages taken out of node-a's queue before its agent took
    # them.
    with agents_not_consuming(stack, "agent") as bus:
        submitted_at = time.time()
        job = client.submit(spec)
        drop_messages(bus, ["node-a"], START_TASK, job["id"], count=2)
    # A second node, with a DATA_DIR of its own, to be sent a copy of a start message;
    # it starts while the scheduler waits to send the lost messages again.
    stack.add_agent("node-b", 1, data_dir=str(tmp_path / "data-node-b"))
    running = wait_for(
        lambda: (j := client.job(job["id"]))["status"] == "running" and j, 120, "the job to run"
    )
    running_at = time.time()
    scheduled = event_time(client, job["id"], "scheduled")
    assert scheduled is not None
    # Only the scheduler's re-sends, from SQL, can have started them.
    started = [
        dt.datetime.fromisoformat(r["started_at"]).timestamp() for r in running["replica_list"]
    ]
    resend = stack.settings.START_RESEND_AFTER
    assert min(started) - scheduled >= resend - 1, (started, scheduled)

    # Repeated: twice more to the node that runs replica 0 (its agent's own record stops
    # them), once to the other node (only the claim can), and once as a message of an
    # attempt that is not current.
    replica = next(r for r in running["replica_list"] if r["index"] == 0)
    node = replica["node_id"]
    other = "node-b" if node == "node-a" else "node-a"
    start = StartReplica(
        node,
        ReplicaSpec(job["id"], 1, 0, 2, None, "multi_worker_mirrored", command=spec["command"]),
        tf_config=replica["tf_config"],
        port=int(replica["address"].rsplit(":", 1)[1]),
    )
    stale = dataclasses.replace(start, spec=dataclasses.replace(start.spec, attempt=7))
    wait_for(
        lambda: len([n for n in client.nodes() if n["status"] == "ready"]) == 2,
        60,
        "two ready nodes",
    )
    sent_at = time.time()
    for message in (
        start,
        start,
        stale,
        dataclasses.replace(start, node_id=other, port=free_port()),
    ):
        send_start(stack, message)
    wait_for(
        lambda: claimed(stack, other, job["id"]),
        60,
        "the other node to refuse the copy for its claim",
        interval=0.05,
        explain=lambda: log_of(stack, agent_name(other))[-3000:],
    )
    refused_s = time.time() - sent_at  # read from its agent's log: the copy's way there
    final = wait_terminal(client, job["id"])
    assert final["status"] == "succeeded", job_story(client, job["id"])

    assert not claimed(stack, node, job["id"])  # its agent knew it had started them

    # Repeated to its agent restarted, which remembers nothing it started (a message
    # redelivered after an agent's crash is this case): the claim, under its own node's
    # name, holds. The copy is answered as a start its predecessor never reported (so a
    # gang does not wait for it, workers/node/exits.py), which a finished replica's record
    # ignores.
    since = len(log_of(stack, agent_name(node)))
    restarted_at = time.time()
    stack.kill(agent_name(node))
    stack.restart(agent_name(node))
    wait_for(
        lambda: any(
            n["id"] == node
            and n["status"] == "ready"
            and dt.datetime.fromisoformat(n["last_heartbeat"]).timestamp() > restarted_at
            for n in client.nodes()
        ),
        60,
        "the restarted agent's heartbeat",
    )
    resent_at = time.time()
    send_start(stack, start)
    wait_for(
        lambda: claimed(stack, node, job["id"], since, by_predecessor=True),
        60,
        "the restarted agent to refuse the copy for its claim",
        interval=0.05,
    )
    refused_after_restart_s = time.time() - resent_at
    assert {r["index"]: r["exit_code"] for r in client.job(job["id"])["replica_list"]} == {
        0: 0,
        1: 0,
    }

    # One process per replica: one start each, and nothing of it left running.
    assert sorted(started_events(stack, job["id"])) == [(1, 0), (1, 1)], [
        (e["to_status"], e["reason"]) for e in client.events(job["id"])
    ]
    assert not attempt_processes(stack, job["id"], 1)
    assert not layout.log_file(agent_data_dirs(stack)[other], job["id"], 1, 0).exists()
    assert_nothing_lost(stack, job["id"])
    record(
        "start messages lost on their way to the agent",
        f"re-sent from SQL to the replicas still pending after {resend:g} s"
        " (COHORT_START_RESEND_AFTER); the gang started then and succeeded",
        None,
        running_at - submitted_at,
        f"nothing: {min(started) - scheduled:.1f} s of waiting from the placing",
    )
    # Nothing to recover from a copy refused: detect is how long the second node took to
    # refuse its copy (from the sending to its agent's log line); the copy to the
    # restarted agent, refused for its predecessor's claim, is in the action.
    record(
        "start message delivered again: twice to its node, to a second node, to its agent "
        "restarted; and one of a stale attempt",
        "the agent's record of what it started, the claim (SET NX) per (job, attempt, "
        "replica) on the second node, the current-attempt check: ignored; after the "
        "restart, the claim under its own node's name: answered as never started "
        f"(refused {refused_after_restart_s:.1f} s after it was sent)",
        refused_s,
        None,
        "nothing: one process per replica",
    )


def test_redis_restart_mid_job(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack()
    job = past_first_checkpoint(stack, client, LONG_JOB)
    down_at = time.time()
    stack.kill("redis")  # SIGKILL; it keeps nothing on disk, so it comes back empty
    stack.restart_redis()
    before = len(client.metrics(job["id"], limit=100_000))

    def recovered() -> bool:
        # Agents heartbeat again, and new metric points reach SQL again.
        import datetime as dt

        beats = [dt.datetime.fromisoformat(n["last_heartbeat"]).timestamp() for n in client.nodes()]
        return (
            bool(beats)
            and min(beats) > down_at
            and len(client.metrics(job["id"], limit=100_000)) > before
        )

    wait_for(recovered, 120, "heartbeats and metric ingest after the restart")
    recovered_at = time.time()
    final = wait_terminal(client, job["id"], timeout=300)
    assert final["status"] == "succeeded", job_story(client, job["id"])
    # The replicas kept training through the outage; their metric points and log lines
    # waited in their files and reached SQL afterwards, each once.
    steps = steps_seen(client, job["id"], final["attempt"])
    assert max(steps) == LONG_JOB_STEPS
    assert_nothing_lost(stack, job["id"])
    record(
        "Redis killed and restarted empty mid-job",
        "agents re-register, the scheduler re-takes its lock and re-reads SQL, agents "
        f"ship what their replicas wrote meanwhile; job finished in attempt {final['attempt']}",
        None,
        recovered_at - down_at,
        "nothing: every point of the finishing attempt and every log line stored once"
        + ("; a gang restart" if final["attempt"] > 1 else ""),
    )


def test_api_restart_under_retried_submissions(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack()
    spec = {"name": "x", "replicas": 64}  # never fits: stays queued, spares the CPUs
    acknowledged: dict[str, int] = {}
    errors: list[str] = []

    def submit(keys: list[str]) -> None:
        http = httpx.Client(
            base_url=stack.url, timeout=5.0, headers={"Authorization": f"Bearer {stack.token}"}
        )
        for key in keys:
            deadline = time.monotonic() + 60
            while True:
                try:
                    response = http.post(
                        "/api/v1/jobs", json={**spec, "name": key}, headers={"Idempotency-Key": key}
                    )
                    if response.status_code == 201:
                        acknowledged[key] = response.json()["id"]
                        break
                    if response.status_code < 500:
                        errors.append(f"{key}: {response.status_code} {response.text}")
                        break
                except httpx.HTTPError:
                    pass  # the API is down: retry, as a client with a key may
                if time.monotonic() > deadline:
                    errors.append(f"{key}: gave up")
                    break
                time.sleep(0.05)

    keys = [f"key-{i:03d}" for i in range(200)]
    threads = [threading.Thread(target=submit, args=(keys[i::4],)) for i in range(4)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(acknowledged) >= 50, 60, "50 acknowledged submissions", interval=0.05)
    down_at = time.time()
    stack.kill("api")
    stack.restart("api")
    client.wait_ready(timeout=60)
    back_at = time.time()
    for thread in threads:
        thread.join()
    assert not errors, errors[:5]
    assert len(acknowledged) == 200
    # A key is stored once by its unique constraint (project, idempotency key): what is
    # evidence is that each acknowledged job is the one stored, under its key, and that
    # nothing was stored that no client was told of.
    stored: dict[str, int] = {}
    listed = 0
    cursor = None
    while True:
        page = client.jobs(limit=500, **({"cursor": cursor} if cursor else {}))
        stored |= {item["name"]: item["id"] for item in page["items"]}
        listed += len(page["items"])
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert stored == acknowledged, sorted(set(stored.items()) ^ set(acknowledged.items()))[:5]
    assert listed == len(stored)  # no name listed twice
    record(
        "API killed and restarted during 200 retried submissions",
        "clients retry with Idempotency-Key; each key stored once",
        None,
        back_at - down_at,
        "nothing: 200 acknowledged, each the job stored under its key, nothing else stored",
    )


def test_scheduler_restart_mid_job(make_stack) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack()
    steps = 400  # 12 s of a stepper's steps (tests/e2e/stepper.py)
    job = client.submit(stepping_job(steps, 0.03, name="long", **GANG))
    wait_for(lambda: max(steps_seen(client, job["id"], 1) or [0]) >= 100, 120, "training")
    down_at = time.time()
    stack.kill("scheduler")  # SIGKILL: its lock expires, its unacknowledged events wait
    queued = client.submit({"name": "while-down", "replicas": 64})  # committed, not placed
    stack.restart("scheduler")
    # The job submitted while no scheduler ran is seen from SQL and given a reason.
    waiting = wait_for(
        lambda: (j := client.job(queued["id"]))["reason"].startswith("unschedulable") and j,
        60,
        "the scheduler to look at the new job",
    )
    back_at = time.time()
    assert waiting["status"] == "queued"
    final = wait_terminal(client, job["id"], timeout=300)
    assert final["status"] == "succeeded", job_story(client, job["id"])
    assert final["attempt"] == 1, job_story(client, job["id"])  # the gang never noticed
    assert max(steps_seen(client, job["id"], 1)) == steps
    assert_nothing_lost(stack, job["id"])
    record(
        "scheduler killed (SIGKILL) and restarted mid-job",
        "the new scheduler takes the lock when the old one's expires, re-reads SQL and its "
        "unacknowledged events; the running gang is untouched",
        None,
        back_at - down_at,
        "nothing",
    )
