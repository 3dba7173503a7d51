"""A node agent killed mid-job, and a cancel that must reach every replica on every node
(its first stop messages lost on the way)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psutil
import pytest

from services.storage.store import open_store
from services.wire.replica import STOP_TASK
from tests.e2e.conftest import job_story, wait_for, wait_terminal
from tests.e2e.stepper import stepper_bundle, stepping_job
from tests.faults.conftest import (
    LONG_JOB,
    POOL,
    chief_checkpoints,
    event_time,
    past_first_checkpoint,
    pool_full,
    record,
    saved_checkpoint,
    steps_redone,
    steps_seen,
    stored_checkpoint,
    warm_replicas,
)
from tests.faults.lost_messages import agents_not_consuming, drop_messages
from tests.faults.nothing_lost import assert_nothing_lost
from tests.faults.processes import attempt_processes

pytestmark = [pytest.mark.e2e, pytest.mark.slow(65)]


@pytest.mark.parametrize("pool", [0, POOL], ids=["cold", "pooled"])
def test_killed_agent_job_restarts_elsewhere(make_stack, pool: int) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack(slots=2, COHORT_REPLICA_POOL_SIZE=str(pool))
    stack.add_agent("node-b", 2)
    wait_for(
        lambda: len([n for n in client.nodes() if n["status"] == "ready"]) == 2,
        60,
        "two ready nodes",
    )
    if pool:
        pool_full(stack, 2 * pool)  # both agents' (they share DATA_DIR, and its pool log)
    job = past_first_checkpoint(stack, client, LONG_JOB)  # both nodes share DATA_DIR
    # ... and its store, where the agent mirrors the checkpoints: the one the agents'
    # settings name, as open_store finds it.
    store = Path(open_store(settings=stack.settings).root)
    wait_for(lambda: stored_checkpoint(store, job["id"]), 60, "the first stored checkpoint")
    assert warm_replicas(client, job["id"], 1) == ({0, 1} if pool else set())
    node = job["replica_list"][0]["node_id"]
    assert {r["node_id"] for r in job["replica_list"]} == {node}  # packed on one node
    killed_at = time.time()
    stack.kill("agent" if node == "node-a" else "agent-node-b")

    # Its replicas notice their agent is gone and stop, and whatever they started with
    # them: no second copy of the gang.
    wait_for(
        lambda: not attempt_processes(stack, job["id"], 1),
        15,
        "the orphaned replicas to stop",
        interval=0.25,
    )
    # The gang resumes from the store's checkpoint, the last one the killed agent
    # mirrored: a gang's restore takes the store's whenever it differs (on other nodes,
    # only the store's is seen by all). Until their watcher noticed, the orphans trained
    # on and may have saved a newer one, on their node's disk alone.
    stored = stored_checkpoint(store, job["id"])
    local = saved_checkpoint(chief_checkpoints(stack, job["id"]))
    assert stored is not None and local is not None and local >= stored, (stored, local)
    resumed_after = stored * LONG_JOB["hyperparameters"]["steps_per_epoch"]  # epoch ends only
    final = wait_terminal(client, job["id"])
    events = client.events(job["id"])
    assert final["status"] == "succeeded", job_story(client, job["id"])
    assert final["attempt"] == 2, job_story(client, job["id"])
    other = "node-b" if node == "node-a" else "node-a"
    assert {r["node_id"] for r in final["replica_list"]} == {other}
    restarting = event_time(client, job["id"], "restarting")
    rescheduled = event_time(client, job["id"], "scheduled", attempt=2)
    assert restarting is not None and rescheduled is not None
    reason = next(e["reason"] for e in events if e["to_status"] == "restarting")
    assert f"node {node} stopped answering" in reason
    # The bound: placed again within 30 s of the last heartbeat.
    assert rescheduled - killed_at < 30
    # The other node resumes from the stored checkpoint.
    second = steps_seen(client, job["id"], 2)
    assert min(second) == resumed_after + 1, (min(second), resumed_after)
    first_step_2 = min(
        p["ts"]
        for p in client.metrics(job["id"], attempt=2, name=["loss"], replica=0)
        if p["step"] == min(second)
    )
    assert_nothing_lost(stack, job["id"], agent_died_in=[1])
    redone = steps_redone(
        max(steps_seen(client, job["id"], 1)), resumed_after, "the last epoch end"
    )
    record(
        "node agent killed (SIGKILL)",
        "its replicas stop themselves (parent gone); node "
        "marked lost after 6 s without heartbeat; gang placed on the other node, resumed "
        "from checkpoint",
        restarting - killed_at,
        first_step_2 - killed_at,
        redone,
        pooled=bool(pool),
    )


@pytest.mark.parametrize("pool", [0, 1], ids=["cold", "pooled"])
def test_cancel_reaches_every_replica_on_every_node(make_stack, tmp_path, pool: int) -> None:  # type: ignore[no-untyped-def]
    stack, client = make_stack(slots=1, COHORT_REPLICA_POOL_SIZE=str(pool))
    stack.add_agent("node-b", 1)
    wait_for(
        lambda: len([n for n in client.nodes() if n["status"] == "ready"]) == 2,
        60,
        "two ready nodes",
    )
    # Steppers (tests/e2e/stepper.py) that would run for hours: only the stops end them.
    # Pooled: the stepper as a bundle's script (`python stepper.py`), which the warm
    # process of each node runs.
    bundle = stepper_bundle(client, tmp_path) if pool else None
    if pool:
        pool_full(stack, 2 * pool)  # both agents' (they share DATA_DIR, and its pool log)
    job = client.submit(stepping_job(1_000_000, 0.01, bundle=bundle, name="cancelled", replicas=2))
    running = wait_for(
        lambda: (j := client.job(job["id"]))["status"] == "running" and j, 120, "the job to run"
    )
    assert {r["node_id"] for r in running["replica_list"]} == {"node-a", "node-b"}
    wait_for(
        lambda: warm_replicas(client, job["id"], 1) == ({0, 1} if pool else set()),
        30,
        "each replica's first log lines",
    )
    # The first stop messages are lost on their way: taken out of both nodes' queues
    # before the agents could take them. The replicas train on until the scheduler, which
    # finds them still running in SQL, sends the stops again.
    with agents_not_consuming(stack, "agent", "agent-node-b") as bus:
        cancelled_at = time.time()
        client.cancel(job["id"])
        drop_messages(bus, ("node-a", "node-b"), STOP_TASK, job["id"], count=2)
    assert len(attempt_processes(stack, job["id"], 1)) >= 2, "stopped without a stop message"
    resend = stack.settings.STOP_RESEND_AFTER
    wait_for(
        lambda: not attempt_processes(stack, job["id"], 1),
        resend + stack.settings.STOP_GRACE + 30,
        "every replica process to exit",
        interval=0.25,
    )
    gone = time.time() - cancelled_at
    assert gone >= resend, f"gone {gone:.1f}s after the cancel: before a re-send"
    # Each exit is reported once its last log lines, points and files are out
    # (supervision.watch): seconds on a loaded machine.
    final = wait_for(
        lambda: (
            (j := client.job(job["id"]))
            and all(r["status"] == "stopped" for r in j["replica_list"])
            and j
        ),
        60,
        "replicas recorded",
        explain=lambda: job_story(client, job["id"]),
    )
    assert final["status"] == "cancelled"
    assert all(r["exit_code"] is not None for r in final["replica_list"])
    assert_nothing_lost(stack, job["id"])
    record(
        "cancel of a running 2-node job, its stop messages lost on their way",
        f"the stops re-sent from SQL after {resend:g} s "
        "(COHORT_STOP_RESEND_AFTER): SIGTERM to each replica's process group on both nodes "
        "(SIGKILL after the grace period)",
        None,
        gone,
        "nothing (cancelled)",
        pooled=bool(pool),
    )


def test_an_agent_restarted_in_place_ends_what_its_predecessor_left_before_anything_starts(
    make_stack,
) -> None:  # type: ignore[no-untyped-def]
    # The chaos soak: a replica frozen (SIGSTOP) when its agent was killed holds its
    # guard's SIGTERM until the SIGKILL ten seconds later. The agent restarted in place
    # beat "nothing runs here", the scheduler placed the next attempt, and two attempts of
    # the job were alive together. Here the whole process group is frozen (the guard
    # too, as a freeze of the group or its cgroup leaves it), so nothing of the old agent's
    # can end it, however long the new agent takes to start on a loaded machine: only the
    # new agent, which ends its predecessor's processes before its first beat.
    stack, client = make_stack(slots=1)
    job = client.submit(
        stepping_job(
            300,
            0.05,
            name="frozen",
            replicas=1,
            strategy="one_device",
            restart_policy="on_failure",
            max_restarts=2,
        )
    )
    wait_for(
        lambda: client.job(job["id"])["status"] == "running" and steps_seen(client, job["id"], 1),
        120,
        "the job to step",
    )
    frozen = attempt_processes(stack, job["id"], 1)  # the guard and the job's command
    assert len(frozen) == 2, [p.cmdline() for p in frozen]
    os.killpg(os.getpgid(frozen[0].pid), signal.SIGSTOP)
    try:
        stack.kill("agent")
        killed_at = time.monotonic()
        stack.restart("agent")
        # Until the job ends: when each attempt's processes were seen alive.
        seen: dict[int, list[float]] = {1: [], 2: []}

        def ended() -> bool:
            for attempt, times in seen.items():
                if attempt_processes(stack, job["id"], attempt):
                    times.append(time.monotonic() - killed_at)
            return client.job(job["id"])["status"] in ("succeeded", "failed")

        wait_for(ended, 180, "the job to end", interval=0.1)
        final = client.job(job["id"])
        assert final["status"] == "succeeded", job_story(client, job["id"])
        assert final["attempt"] == 2 and seen[2], seen
        # Never two attempts alive at once: the frozen ones were ended by the new agent,
        # which waited for them before its first beat, and says so.
        assert max(seen[1]) < min(seen[2]), (max(seen[1]), min(seen[2]))
        log = (stack.log_dir / "agent.log").read_text(errors="replace")
        assert "ended 2 processes a previous agent of node node-a left running" in log, log[-3000:]
        # Attempt 1's agent was killed with it: the lines it had not shipped went with it.
        assert_nothing_lost(stack, job["id"], agent_died_in=[1])
    finally:  # on a failure, not left frozen for good
        for process in frozen:
            with contextlib.suppress(psutil.Error):
                process.kill()


class CutAtFirstWrite(threading.Thread):
    """A TCP proxy to Redis that, at the first HSET (an agent's heartbeat) of any client,
    cuts every connection and refuses new ones: what an agent sees when Redis restarts
    right after its start-up check. `resume()` lets connections through again."""

    def __init__(self, target: tuple[str, int]) -> None:
        super().__init__(daemon=True, name="redis-proxy")
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cut = threading.Event()
        self.armed = True  # until resume(): one cut only
        self.sockets: list[socket.socket] = []

    def run(self) -> None:
        while True:
            client, _ = self.listener.accept()
            if self.cut.is_set():
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            for source, sink, replies in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(
                    target=self._pump, args=(source, sink, replies), daemon=True
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if not replies and self.armed and b"HSET" in data and not self.cut.is_set():
                    self.cut.set()
                    for sock in self.sockets:
                        with contextlib.suppress(OSError):
                            sock.shutdown(socket.SHUT_RDWR)
                if self.cut.is_set():
                    return
                sink.sendall(data)

    def resume(self) -> None:
        self.armed = False
        self.cut.clear()


def test_an_agent_whose_redis_goes_away_as_it_starts_waits_for_it(make_stack) -> None:  # type: ignore[no-untyped-def]
    # The chaos soak saw an agent, restarted a moment before Redis was, end with a
    # traceback: its start-up check passed, its first heartbeat (made outside the
    # heartbeat thread's retries) did not.
    stack, client = make_stack(slots=0)
    url = urlsplit(stack.settings.redis_url)
    proxy = CutAtFirstWrite((url.hostname or "127.0.0.1", url.port or 6379))
    proxy.start()
    via_proxy = urlunsplit(
        url._replace(netloc=url.netloc.replace(f":{url.port}", f":{proxy.port}"))
    )
    agent = stack.add_agent("node-late", 1, redis_url=via_proxy)
    log = stack.log_dir / "agent-node-late.log"
    wait_for(lambda: proxy.cut.is_set(), 60, "the agent's first heartbeat")
    wait_for(
        lambda: "heartbeat failed" in log.read_text(errors="replace") or agent.poll() is not None,
        60,
        "the agent's first heartbeat to fail",
    )
    assert agent.poll() is None, log.read_text(errors="replace")[-3000:]
    proxy.resume()
    wait_for(
        lambda: any(n["id"] == "node-late" and n["status"] == "ready" for n in client.nodes()),
        60,
        "the agent to register once Redis is back",
    )
    job = client.submit(stepping_job(5, name="after", replicas=1, strategy="one_device"))
    final = wait_terminal(client, job["id"])
    assert final["status"] == "succeeded", job_story(client, job["id"])
    assert {r["node_id"] for r in final["replica_list"]} == {"node-late"}
    assert agent.poll() is None
    assert_nothing_lost(stack, job["id"])
