"""A network partition: the control link of the agent running a gang is cut mid-job.

Two agents, each in a network namespace of its own (tests/e2e/netns.py), reach the host's
Redis over their own link; the api and the scheduler run on the host. The link of the
agent running the job's gang goes down: its processes run on, only its network goes.
Every replica process of the job, in either namespace, is listed every 0.2 s from its
environment (all namespaces share this PID namespace; workers/node/environment.py marks
each with its job, attempt, node and the agent's DATA_DIR), so whether two gangs of the
job were ever alive at once is read from the processes themselves, never from logs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis

from cli.stack import Stack
from cohort.client import Client
from services.settings import Settings
from services.statuses import TERMINAL_STATUSES
from services.wire.events import ReplicaExited, decode_event
from services.wire.keys import EVENTS_STREAM, LEADER_GROUP
from tests.capabilities import need_namespaces
from tests.e2e.conftest import PORT_BASE, free_port, wait_for, wait_terminal
from tests.e2e.multinode import redis_and_database, start_agent, stop_agent, wait_nodes
from tests.e2e.netns import Machine, cut, heal, two_machines
from tests.faults.conftest import (
    FAST,
    FAULT_TOKEN,
    LONG_JOB,
    event_time,
    record,
    steps_redone,
    steps_seen,
    stored_checkpoint,
)
from tests.faults.nothing_lost import assert_stored_as_written
from workers.node.lease import fence_grace

pytestmark = [pytest.mark.e2e, pytest.mark.slow(70)]

EPOCHS, STEPS = 8, 100  # a checkpoint at each epoch end
JOB: dict[str, Any] = {
    **LONG_JOB,
    "name": "partitioned",
    "hyperparameters": {"epochs": EPOCHS, "steps_per_epoch": STEPS},
}
SETTINGS = Settings(**{k.removeprefix("COHORT_"): v for k, v in FAST.items()})
SAMPLE_EVERY = 0.2  # seconds between two listings of the job's processes
# What the fenced replicas' end may trail the lease and the fence's grace by: the sampler's
# period and the agent's threads waiting for one of the two busy cores.
SLACK = 1.5


@dataclass(frozen=True)
class Cluster:
    client: Client
    bus: redis.Redis  # the control plane's Redis, read from the host
    machines: dict[str, Machine]  # by node id
    data_dirs: dict[str, str]  # each namespaced agent's DATA_DIR (resolved) -> node id
    artifacts: Path  # the store both agents share (a file system the cut leaves alone)
    logs: dict[str, Path]  # each agent's log
    database_url: str


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """api + scheduler (+ a 0-slot agent) on the host, a 2-slot agent per namespace, each
    with a DATA_DIR of its own; all on a Redis of the test's own, with FAST timeouts."""
    with ExitStack() as cleanup:  # undone in reverse: agents, stack, db, redis, namespaces
        need_namespaces()  # as root, a failing `ip` fails the test
        hosts, machines = cleanup.enter_context(two_machines())
        port, url = redis_and_database(cleanup, hosts, tmp_path, "cohort_fault")
        artifacts = tmp_path / "shared-artifacts"
        stack = Stack(
            {
                **FAST,
                "COHORT_DATABASE_URL": url,
                "COHORT_REDIS_URL": f"redis://127.0.0.1:{port}/0",
                "COHORT_DATA_DIR": str(tmp_path / "host"),
                "COHORT_ARTIFACT_URL": str(artifacts),
                "COHORT_API_PORT": str(free_port()),
                "COHORT_NODE_ID": "host",
                "COHORT_NODE_SLOTS": "0",
                "COHORT_PORT_RANGE_START": PORT_BASE,
                # Cold processes only: a warm one is exec'd before its job is
                # known, so its environment would not name the job.
                "COHORT_REPLICA_POOL_SIZE": "0",
                "COHORT_BOOTSTRAP_TOKEN": FAULT_TOKEN,
            },
            quiet=True,
        )
        stack.start()
        cleanup.callback(stack.stop)
        client = Client(stack.url, stack.token)
        # Agents hold no SQL credentials; each reaches Redis over its own link.
        env = {k: v for k, v in stack.env.items() if k != "COHORT_DATABASE_URL"}
        data_dirs, logs = {}, {}
        for machine, host in zip(machines, hosts, strict=True):
            data_dir = (tmp_path / machine.netns).resolve()
            agent = start_agent(
                env,
                machine.netns,
                2,
                data_dir,
                address=machine.address,
                prefix=machine.prefix,
                COHORT_REDIS_URL=f"redis://{host}:{port}/0",
            )
            cleanup.callback(stop_agent, agent)
            data_dirs[str(data_dir)] = machine.netns
            logs[machine.netns] = data_dir / "agent.log"
        wait_nodes(client, {m.netns for m in machines})
        bus = redis.Redis(port=port, decode_responses=True)
        cleanup.callback(bus.close)
        yield Cluster(client, bus, {m.netns: m for m in machines}, data_dirs, artifacts, logs, url)


@dataclass(frozen=True)
class Sample:
    at: float  # time.time() when the listing began
    replicas: frozenset[tuple[int, str, int]]  # (attempt, node id, pid) of each process


class ReplicaSampler(threading.Thread):
    """Lists every process of job `job_id` that one of the agents started, every
    SAMPLE_EVERY seconds, from the environment it was exec'd with."""

    def __init__(self, job_id: int, data_dirs: dict[str, str]) -> None:
        super().__init__(daemon=True, name="replica-sampler")
        self.job_id, self.data_dirs = str(job_id), data_dirs
        self.samples: list[Sample] = []
        self.created: dict[int, float] = {}  # pid -> when the process was created
        self.parents: dict[int, int] = {}  # pid -> its parent's pid
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            at, found = time.time(), set()
            for process in psutil.process_iter():
                try:
                    env = process.environ()
                    created = process.create_time()
                except (psutil.Error, OSError):  # gone meanwhile, or a zombie
                    continue
                if (
                    env.get("COHORT_JOB_ID") == self.job_id
                    and env.get("COHORT_NODE_DATA_DIR") in self.data_dirs
                ):
                    found.add(
                        (
                            int(env["COHORT_ATTEMPT"]),
                            self.data_dirs[env["COHORT_NODE_DATA_DIR"]],
                            process.pid,
                        )
                    )
                    self.created[process.pid] = created
                    self.parents.setdefault(process.pid, process.ppid())
            self.samples.append(Sample(at, frozenset(found)))
            self.done.wait(SAMPLE_EVERY)

    def stop(self) -> list[Sample]:
        self.done.set()
        self.join(30)
        return self.samples

    def replicas(self, attempt: int) -> set[int]:
        """The pids of attempt `attempt`'s replica processes: those the agent started,
        not what they ran for a moment (an import may run `ldconfig`, with their marks)."""
        pids = {p for s in self.samples for a, _n, p in s.replicas if a == attempt}
        return {p for p in pids if self.parents.get(p) not in pids}


def timeline(samples: list[Sample], since: float) -> list[tuple[float, list[tuple[int, str]]]]:
    """Each change of what ran, from `since` (for a failure's message)."""
    changes, previous = [], None
    for sample in samples:
        now = sorted((a, n) for a, n, _p in sample.replicas)
        if now != previous:
            changes.append((round(sample.at - since, 2), now))
            previous = now
    return changes


def node_status(client: Client, node_id: str) -> str:
    return next(n["status"] for n in client.nodes() if n["id"] == node_id)


def late_exits(bus: redis.Redis, node_id: str, job_id: int) -> dict[int, str]:
    """The stream ids of `node_id`'s replica_exited events for attempt 1, by replica."""
    found = {}
    for entry_id, fields in bus.xrange(EVENTS_STREAM):
        event = decode_event(fields)
        if (
            isinstance(event, ReplicaExited)
            and event.node_id == node_id
            and event.job_id == job_id
            and event.attempt == 1
        ):
            found[event.index] = entry_id
    return found


def read_by_leader(bus: redis.Redis, entry_ids: list[str]) -> bool:
    """Whether the leader's group has read and acknowledged every one of `entry_ids`."""

    def number(entry_id: str) -> tuple[int, int]:
        millis, sequence = entry_id.split("-")
        return int(millis), int(sequence)

    group = next(g for g in bus.xinfo_groups(EVENTS_STREAM) if g["name"] == LEADER_GROUP)
    pending = {
        p["message_id"] for p in bus.xpending_range(EVENTS_STREAM, LEADER_GROUP, "-", "+", 1000)
    }
    return all(
        number(group["last-delivered-id"]) >= number(i) and i not in pending for i in entry_ids
    )


def test_a_partitioned_agent_fences_its_gang_and_the_job_moves_once(cluster: Cluster) -> None:
    client, bus = cluster.client, cluster.bus
    job_id = client.submit(JOB)["id"]
    sampler = ReplicaSampler(job_id, cluster.data_dirs)
    sampler.start()
    try:
        # Mid-job, past a checkpoint the store holds.
        number = wait_for(
            lambda: (
                (n := stored_checkpoint(cluster.artifacts, job_id))
                and max(steps_seen(client, job_id, 1) or [0]) >= STEPS + 20
                and n
            ),
            300,
            "training past the first stored checkpoint",
        )
        first = client.job(job_id)
        node = first["replica_list"][0]["node_id"]
        assert {r["node_id"] for r in first["replica_list"]} == {node}  # packed on one
        other = next(n for n in cluster.machines if n != node)
        before = max(steps_seen(client, job_id, 1))
        assert before < EPOCHS * STEPS, "the job finished before the cut"

        cut_at = time.time()
        cut(cluster.machines[node])
        lost = wait_for(
            lambda: node_status(client, node) == "lost" and time.time(),
            60,
            f"{node} to be marked lost",
        )
        second = wait_for(
            lambda: (j := client.job(job_id))["attempt"] == 2 and j["status"] == "running" and j,
            180,
            "attempt 2 to run",
        )
        assert {r["node_id"] for r in second["replica_list"]} == {other}

        # Healed while attempt 2 trains: the agent comes back, and what it tells late
        # about attempt 1 (its replicas' exits) must change nothing.
        healing_at = time.time()
        heal(cluster.machines[node])
        wait_for(lambda: node_status(client, node) == "ready", 60, f"{node} to be ready again")
        final = wait_terminal(client, job_id, timeout=400)
        late = wait_for(
            lambda: len(e := late_exits(bus, node, job_id)) == 2 and e,
            120,
            f"{node}'s reports of attempt 1's exits",
        )
        wait_for(
            lambda: read_by_leader(bus, list(late.values())), 60, "the leader to read those reports"
        )
        after = client.job(job_id)
    finally:
        samples = sampler.stop()

    events = client.events(job_id)
    story = [(e["attempt"], e["to_status"], e["reason"]) for e in events]
    assert final["status"] == "succeeded", story
    assert (after["status"], after["attempt"]) == ("succeeded", 2), story
    assert [e["to_status"] for e in events if e["to_status"] in TERMINAL_STATUSES] == [
        "succeeded"
    ], story
    assert {r["node_id"] for r in after["replica_list"]} == {other}
    reason = next(r for _a, status, r in story if status == "restarting")
    assert f"node {node} stopped answering" in reason, story

    # The processes: attempt 1 on the cut node alone, attempt 2 on the other alone, each
    # replica started once (the healed agent started nothing of attempt 1 again).
    story_of_processes = timeline(samples, cut_at)
    seen = {(a, n) for s in samples for a, n, _pid in s.replicas}
    assert seen == {(1, node), (2, other)}, story_of_processes
    assert sampler.replicas(1) == {r["pid"] for r in first["replica_list"]}, story_of_processes
    assert sampler.replicas(2) == {r["pid"] for r in after["replica_list"]}, story_of_processes
    # At no moment two attempts' processes alive: in no listing, and no process of
    # attempt 2 was created before the last listing that still showed one of attempt 1.
    both = [s for s in samples if len({a for a, _n, _p in s.replicas}) > 1]
    assert both == [], story_of_processes
    last_alive = max(s.at for s in samples if any(a == 1 for a, _n, _p in s.replicas))
    gone_at = min(s.at for s in samples if s.at > last_alive)
    first_created = min(sampler.created[p] for s in samples for a, _n, p in s.replicas if a == 2)
    assert first_created > last_alive, (first_created - cut_at, story_of_processes)

    # The cut-off agent stopped its replicas once its lease ran out, not before (they ran
    # on without a network) and not much after: the lease and the fence's grace.
    assert last_alive >= cut_at + SETTINGS.AGENT_LEASE - SETTINGS.HEARTBEAT_INTERVAL - 1.0, (
        story_of_processes
    )
    bound = SETTINGS.AGENT_LEASE + fence_grace(SETTINGS) + SLACK
    assert gone_at - cut_at <= bound, (bound, story_of_processes)
    assert "no heartbeat taken by Redis" in cluster.logs[node].read_text()
    assert lost - cut_at >= SETTINGS.NODE_TIMEOUT - SETTINGS.HEARTBEAT_INTERVAL - 1.0
    # The link came back while attempt 2 trained, and what the agent then sent about
    # attempt 1 was sent after (it could not before); the job's story ended as it was.
    assert last_alive < healing_at < final_at(events), story
    assert all(int(i.split("-")[0]) / 1000 >= healing_at - 0.1 for i in late.values()), (
        late,
        healing_at,
    )
    assert events[-1]["to_status"] == "succeeded", story

    # Resumed from a checkpoint, attempt 2's steps all there; every point and log line
    # each replica wrote, on either node, stored as written.
    assert_stored_as_written(
        cluster.database_url,
        {node_id: Path(data_dir) for data_dir, node_id in cluster.data_dirs.items()},
        job_id,
    )
    steps_1, steps_2 = steps_seen(client, job_id, 1), steps_seen(client, job_id, 2)
    resumed_after = min(steps_2) - 1
    assert resumed_after >= number * STEPS and resumed_after % STEPS == 0, (
        number,
        resumed_after,
        max(steps_1),
    )
    assert steps_2 == list(range(resumed_after + 1, EPOCHS * STEPS + 1))
    assert max(steps_1) >= before

    restarting = event_time(client, job_id, "restarting")
    assert restarting is not None
    first_step_2 = min(
        p["ts"]
        for p in client.metrics(job_id, attempt=2, name=["loss"], replica=0)
        if p["step"] == min(steps_2)
    )
    record(
        "network partition: one agent's link cut mid-job",
        f"the cut-off agent stopped its replicas {gone_at - cut_at:.1f} s after the cut "
        f"(lease {SETTINGS.AGENT_LEASE:.0f} s); node marked lost after "
        f"{SETTINGS.NODE_TIMEOUT:.0f} s without heartbeat; gang placed on the other node, "
        "resumed from checkpoint, never two gangs alive; healed, the agent re-registered "
        "and its late reports of attempt 1 changed nothing",
        restarting - cut_at,
        first_step_2 - cut_at,
        steps_redone(max(steps_1), resumed_after, "the last epoch end"),
    )


def final_at(events: list[dict[str, Any]]) -> float:
    import datetime as dt

    return max(
        dt.datetime.fromisoformat(e["created_at"]).timestamp()
        for e in events
        if e["to_status"] in TERMINAL_STATUSES
    )
