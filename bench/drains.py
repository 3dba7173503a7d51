"""What a planned stop costs a job: steps trained twice and the time until the gang trains
again elsewhere, for a node drained (`cohort node drain`), its agent sent SIGTERM (a host
shutdown, a spot notice forwarded), and its agent and replicas killed with SIGKILL (the
host lost), on the same command job.

The job is one replica of a user's command that reports a step every 50 ms, saves its
step into $COHORT_CHECKPOINT_DIR every 50 steps (a periodic checkpoint) and on SIGUSR1
(then exits 75), and resumes from the saved step. Two agents with a DATA_DIR each share
only the artifact store; each round runs the three faults in turn (order swapped every
round, round 0 a warm-up not kept), each on the node the job runs on, then brings that
node back (undrain, restart its agent) and cancels the job. Steps redone: the last step
the stopped attempt stored, less the step the next attempt resumed after (0 when it
resumed past it). Time: from the fault to the next attempt's first step.

    .venv/bin/python bench/drains.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rounds import interleaved  # noqa: E402
from bench.scratch_stack import scratch_stack  # noqa: E402
from cli.stack import Stack  # noqa: E402
from cohort.client import Client  # noqa: E402
from tests.e2e.conftest import job_story, wait_for  # noqa: E402
from tests.faults.conftest import FAST  # noqa: E402
from tests.faults.processes import attempt_processes  # noqa: E402
from tests.faults.saving_job import saving_job  # noqa: E402

EVERY, PAUSE, STEPS, PAST = 50, 0.05, 100_000, 75  # checkpoint interval, step time, steps

JOB = saving_job(
    STEPS, PAUSE, every=EVERY, name="drain-bench", replicas=1, restart_policy="on_failure"
) | {"max_restarts": 100}


def steps(client: Client, job_id: int, attempt: int) -> list[int]:
    points = client.metrics(job_id, name=["loss"], attempt=attempt, limit=100_000)
    return sorted(p["step"] for p in points)


class Bench:
    """The stack and the per-fault results (steps redone per round)."""

    def __init__(self, stack: Stack, client: Client) -> None:
        self.stack, self.client = stack, client
        self.redone: dict[str, list[int]] = {"drain": [], "sigterm": [], "sigkill": []}

    def agent(self, node: str) -> str:
        return "agent" if node == "node-a" else f"agent-{node}"

    def ready(self, count: int = 2) -> None:
        wait_for(
            lambda: len([n for n in self.client.nodes() if n["status"] == "ready"]) == count,
            120,
            f"{count} ready nodes",
        )

    def round(self, fault: str, act: Callable[[str, int], None]) -> float:
        """One job through one fault; seconds from the fault to the next first step."""
        self.ready()
        job = self.client.submit(JOB)["id"]

        def trained() -> int | None:  # the attempt running past step PAST
            attempt = self.client.job(job)["attempt"]
            return attempt if max(steps(self.client, job, attempt), default=0) >= PAST else None

        first = wait_for(trained, 180, "steps", explain=lambda: job_story(self.client, job))
        node = self.client.job(job)["replica_list"][0]["node_id"]
        at = time.time()
        act(node, job)
        second = wait_for(
            lambda: steps(self.client, job, first + 1),
            180,
            "the next attempt's first step",
            explain=lambda: job_story(self.client, job),
        )
        points = self.client.metrics(job, name=["loss"], attempt=first + 1, limit=100_000)
        took = min(p["ts"] for p in points) - at
        last = max(steps(self.client, job, first))
        self.redone[fault].append(max(0, last - (second[0] - 1)))
        self.client.cancel(job)
        # The node back: its agent started again (the other node ran the job meanwhile, as
        # after a host lost), heard from since, its cordon lifted.
        name = self.agent(node)
        if not any(n == name for n, _ in self.stack.children):
            restarted = dt.datetime.now(dt.UTC)
            self.stack.restart(name)
            wait_for(lambda: self.beat_since(node, restarted), 120, f"{node}'s new agent")
        self.client.undrain_node(node)
        return took

    def beat_since(self, node: str, since: dt.datetime) -> bool:
        row = next(n for n in self.client.nodes() if n["id"] == node)
        beat = dt.datetime.fromisoformat(str(row["last_heartbeat"]))
        return row["status"] == "ready" and beat > since

    def drain(self, node: str, _job: int) -> None:
        self.client.drain_node(node, "bench")

    def sigterm(self, node: str, _job: int) -> None:
        name = self.agent(node)
        process = self.stack.child(name)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=180)
        self.stack.children = [(n, p) for n, p in self.stack.children if p is not process]

    def sigkill(self, node: str, job: int) -> None:
        name = self.agent(node)
        replicas = attempt_processes(self.stack, job, 1)
        self.stack.kill(name)  # SIGKILL, its process group
        for process in replicas:
            try:
                process.send_signal(signal.SIGKILL)
            except Exception:  # noqa: BLE001 - gone already
                pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="drain-bench-") as scratch:
        root = Path(scratch)
        env = {**FAST, "COHORT_ARTIFACT_URL": str(root / "store"), "COHORT_NODE_ID": "node-a"}
        env["COHORT_NODE_SLOTS"] = "1"
        with scratch_stack(root, "drains", env) as (stack, client):
            stack.add_agent("node-b", 1, data_dir=str(root / "data-node-b"))
            bench = Bench(stack, client)
            faults: dict[str, Callable[[str, int], None]] = {
                "drain": bench.drain,
                "sigterm": bench.sigterm,
                "sigkill": bench.sigkill,
            }
            times = interleaved(
                {name: (lambda n=name, f=act: bench.round(n, f)) for name, act in faults.items()},
                args.rounds,
            )
            for name in faults:
                bench.redone[name] = bench.redone[name][1:]  # round 0 was the warm-up
    print(
        f"\n{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; checkpoint every {EVERY} "
        f"steps of {PAUSE * 1000:.0f} ms"
    )
    print("| fault | steps redone, median (rounds) | to the next first step, median (rounds) |")
    print("|---|---|---|")
    for name in faults:
        redone, took = bench.redone[name], times[name]
        print(
            f"| {name} | {statistics.median(redone):.0f} ({', '.join(map(str, redone))}) | "
            f"{statistics.median(took):.1f} s ({', '.join(f'{t:.1f}' for t in took)}) |"
        )


if __name__ == "__main__":
    main()
