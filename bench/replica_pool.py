"""Launch -> first step of a 2-replica MultiWorkerMirroredStrategy job: a hand launch, a
node agent's cold spawn, and its warm replica pool (issue 18), interleaved in one run.

    H  by hand: two `python -c SCRIPT` processes with TF_CONFIG; SCRIPT is plain tf_keras
       (the built-in mlp_digits' model, data and batch) and uses no Cohort code at all.
    C  cold: an agent (in this process, as `cohort agent` runs it) with
       COHORT_REPLICA_POOL_SIZE=0 is handed the two StartReplica messages of an
       `mlp_digits` job; it spawns two fresh runners.
    P  pooled: the same, to an agent with COHORT_REPLICA_POOL_SIZE=2 whose two warm
       processes are ready; it hands them the replicas.

Launch is the instant before the first process is started (H) or the first message is
handed to the agent (C, P); first step is the later of the two replicas' first training
step, as each stamps it (H: a Keras callback; C, P: the runner's `first_step` line). The
control plane's part (api, scheduler, dispatch) is not in C or P: bench/overhead.py
measures a whole launch through the REST API. Before every run each side waits until the
pool is ready and every process of the previous run has exited, so no start-up overlaps
another side's measurement (a pooled run's own replacements, which start at its
hand-off, do overlap it: that cost is the pool's).

    .venv/bin/python bench/replica_pool.py [--rounds 3] [--redis redis://127.0.0.1:6379/15]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from services.settings import Settings  # noqa: E402
from services.wire.keys import attempt_key, claim_key  # noqa: E402
from services.wire.replica import ReplicaSpec, StartReplica  # noqa: E402
from workers import layout  # noqa: E402
from workers.node.agent import Agent  # noqa: E402

HP = {"epochs": 1, "steps_per_epoch": 5, "batch_size": 32, "learning_rate": 0.01}
JOB_BASE = 880_000

# The hand launch: mlp_digits' data, model and batch, in plain tf_keras.
SCRIPT = """
import json, os, sys, time
import numpy as np
import tensorflow as tf
import tf_keras as keras
import importlib.util
from pathlib import Path

strategy = tf.distribute.MultiWorkerMirroredStrategy()
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
# scikit-learn's digits file, read as mlp_digits reads it (without importing scikit-learn)
digits = Path(importlib.util.find_spec("sklearn").origin).parent / "datasets/data/digits.csv.gz"
table = np.loadtxt(digits, delimiter=",", dtype=np.float32)
rows = np.random.default_rng(0).permutation(len(table))[: int(0.8 * len(table))]
x, y = table[rows, :-1] / 16.0, table[rows, -1].astype(np.int32)
x, y = x[index::2], y[index::2]
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
data = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=0).repeat()
        .batch(64).with_options(options))
with strategy.scope():
    model = keras.Sequential([keras.layers.Input(shape=(64,)),
                              keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10)])
    model.compile(keras.optimizers.Adam(0.01),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))

class FirstStep(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if batch == 0:
            print(f"first_step ts={time.time()}", flush=True)

model.fit(data, epochs=1, steps_per_epoch=5, callbacks=[FirstStep()], verbose=0)
"""

FIRST_STEP = re.compile(r"first_step ts=([0-9.]+)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cluster(ports: list[int], index: int) -> dict[str, object]:
    return {
        "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
        "task": {"type": "worker", "index": index},
    }


def hand(work: Path, run: int) -> float:
    """Seconds from launch to the hand-launched gang's first step."""
    ports = [free_port(), free_port()]
    logs = [work / f"hand-{run}-{i}.log" for i in range(2)]
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1"}
    launched = time.time()
    processes = []
    for index, path in enumerate(logs):
        with open(path, "wb") as log:
            processes.append(
                subprocess.Popen(  # noqa: S603 - our own argv
                    [sys.executable, "-c", SCRIPT],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**env, "TF_CONFIG": json.dumps(cluster(ports, index))},
                )
            )
    codes = [p.wait(timeout=600) for p in processes]
    if codes != [0, 0]:
        raise RuntimeError(f"hand launch {run} exited {codes}: {logs[0].read_text()[-2000:]}")
    return max(first_step(path) for path in logs) - launched


def first_step(log: Path) -> float:
    found = FIRST_STEP.search(log.read_text(errors="replace"))
    if found is None:
        raise RuntimeError(f"no first step in {log}:\n{log.read_text()[-2000:]}")
    return float(found.group(1))


def through(agent: Agent, bus: redis.Redis, job_id: int) -> tuple[float, bool]:
    """Seconds from handing `agent` the job's two replicas to its first step, and whether
    both ran in warm processes."""
    bus.delete(attempt_key(job_id), claim_key(job_id, 1, 0), claim_key(job_id, 1, 1))
    ports = [free_port(), free_port()]
    messages = [
        StartReplica(
            agent.node_id,
            ReplicaSpec(job_id, 1, index, 2, "mlp_digits", "multi_worker_mirrored", HP),
            tf_config=cluster(ports, index),
            port=ports[index],
        )
        for index in range(2)
    ]
    launched = time.time()
    for message in messages:
        agent.start_replica(message)
    warm = all(p.warm for k, p in list(agent.processes.items()) if k.job_id == job_id)
    deadline = time.monotonic() + 600
    while (
        len(codes := [code for k, (code, *_) in list(agent.exited.items()) if k.job_id == job_id])
        < 2
    ):
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id} did not finish")
        time.sleep(0.05)
    logs = [layout.log_file(agent.data_dir, job_id, 1, i) for i in range(2)]
    if codes != [0, 0]:
        raise RuntimeError(f"job {job_id} exited {codes}: {logs[0].read_text()[-2000:]}")
    return max(first_step(path) for path in logs) - launched, warm


def settle(pooled: Agent) -> None:
    """Wait until the pool's two processes are ready (none is warming up)."""
    deadline = time.monotonic() + 600
    while len(pooled.pool.ready_pids()) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError("the pool did not get ready")
        time.sleep(0.1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--redis", default=os.environ.get("COHORT_BENCH_REDIS", "redis://127.0.0.1:6379/15")
    )
    args = parser.parse_args()
    os.environ["COHORT_REDIS_URL"] = args.redis  # where the agents ship what they follow
    bus = redis.Redis.from_url(args.redis, decode_responses=True)
    work = Path(tempfile.mkdtemp(prefix="replica-pool-bench-"))
    work.chmod(0o711)  # an agent as root runs replicas as each job's uid: they pass through
    agents = {
        name: Agent(
            Settings(
                DATA_DIR=work / name,
                NODE_ID=f"bench-{name}",
                NODE_KEY="ab" * 32,
                REPLICA_POOL_SIZE=size,
            ),
            bus,
        )
        for name, size in (("cold", 0), ("pooled", 2))
    }
    agents["pooled"].start_pool()
    times: dict[str, list[float]] = {"H": [], "C": [], "P": []}
    try:
        for run in range(args.rounds):
            for side in ("H", "C", "P"):
                settle(agents["pooled"])
                job_id = JOB_BASE + 10 * run + "HCP".index(side)
                if side == "H":
                    seconds = hand(work, run)
                else:
                    seconds, warm = through(
                        agents["cold" if side == "C" else "pooled"], bus, job_id
                    )
                    if warm != (side == "P"):
                        raise RuntimeError(f"run {run} side {side}: warm={warm}")
                times[side].append(seconds)
                print(f"round {run + 1} {side}: launch -> first step {seconds:.2f}s", flush=True)
    finally:
        for agent in agents.values():
            agent.shutdown(grace=2)
    median = {side: statistics.median(values) for side, values in times.items()}
    print(
        f"\n{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {platform.node()}, "
        f"{os.cpu_count()} cores, {args.rounds} interleaved rounds (H, C, P)\n"
    )
    print("| side | launch -> first step, each run (s) | median (s) | / hand |")
    print("|---|---|---|---|")
    names = {
        "H": "hand launch (plain script)",
        "C": "agent, cold spawn",
        "P": "agent, warm pool (size 2)",
    }
    for side in ("H", "C", "P"):
        runs = ", ".join(f"{v:.2f}" for v in times[side])
        print(
            f"| {names[side]} | {runs} | {median[side]:.2f} | {median[side] / median['H']:.2f}× |"
        )
    ratios = [p / h for p, h in zip(times["P"], times["H"], strict=True)]
    print(
        f"\npooled / hand, per round: {', '.join(f'{r:.2f}' for r in ratios)} "
        f"(target ≤ 0.35); pooled / cold median: {median['P'] / median['C']:.2f}"
    )


if __name__ == "__main__":
    main()
