"""Check Cohort's GPU placement on a real GPU host: exit 0 when every check holds.

It starts the one-host stack (`cohort up`: embedded Redis and SQLite) with its own
DATA_DIR and ports, offers two of the host's GPUs (COHORT_NODE_GPUS=2), and runs three
`command` jobs whose replicas print what they were given (CUDA_VISIBLE_DEVICES,
CUDA_DEVICE_ORDER, and the UUIDs `nvidia-smi` lists for those GPUs, as strings):

  a. 2 replicas x 1 GPU: each replica gets one GPU, a different one;
  b. the same, submitted while (a) runs: it waits ("... 0 GPUs free") and runs after (a);
  c. 1 replica x 2 GPUs: it gets both.

Then it prints a table and the UUIDs, stops the stack, and exits 1 on any difference.
The replicas need nothing but the standard library and `nvidia-smi` (PyTorch, where their
interpreter has it, is asked too how many devices CUDA shows them). The agent's
TensorFlow GPU probe is turned off (COHORT_NODE_GPU_PROBE=false) when the replicas'
interpreter has no TensorFlow, and the check says so.

On a GPU host without network, from the repository root, after `deploy/gpu-check/pack.sh`
filled .gpu-check/ on a machine with network (see README.md here):

    python3 -m pip install --no-index --no-deps --target /tmp/site .gpu-check/wheels/*.whl \
      && PATH="$PWD/.gpu-check/redis/bin:$PATH" PYTHONPATH=/tmp/site \
         python3 deploy/gpu-check/check.py

`--fake-gpus` (or GPU_CHECK_FAKE_GPUS=1) is for testing this script without a card: a
fake `nvidia-smi` listing two GPUs goes first on the stack's PATH.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GPUS = 2  # the GPUs the check offers (the host's first two); a one-GPU host runs it on one
MARK = "GPU-CHECK "

# The fake of tests/e2e/test_gpus.py: answers the agent's query, and the replicas' (whose
# first two columns are the same).
FAKE_NVIDIA_SMI = """#!/bin/sh
echo "0, GPU-11111111-aaaa-bbbb-cccc-000000000000, 40960, NVIDIA A100-SXM4-40GB"
echo "1, GPU-22222222-aaaa-bbbb-cccc-000000000000, 81559, NVIDIA H100 80GB HBM3"
"""

# What each replica runs (argv: seconds to hold its GPUs): standard library only.
REPLICA = r"""
import json, os, shutil, subprocess, sys, time
seen = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"), "pid": os.getpid()}
smi = shutil.which("nvidia-smi")
listed = {}
if smi:
    out = subprocess.run([smi, "--query-gpu=index,uuid", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=60).stdout
    for line in out.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) > 1:
            listed[cells[0]] = cells[1]
# nvidia-smi lists every GPU whatever CUDA_VISIBLE_DEVICES says: the UUIDs of those named.
names = [e.strip() for e in (seen["cuda_visible_devices"] or "").split(",") if e.strip()]
seen["uuids"] = [listed.get(e, e) for e in names]
try:
    import torch
    seen["torch_devices"] = torch.cuda.device_count()
except Exception as exc:
    seen["torch_devices"] = None
    seen["torch"] = type(exc).__name__
print("GPU-CHECK " + json.dumps(seen), flush=True)
time.sleep(float(sys.argv[1]))
"""


def say(text: str = "") -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--replica-python",
        default=os.environ.get("GPU_CHECK_REPLICA_PYTHON", sys.executable),
        help="the replicas' interpreter (default: this one)",
    )
    parser.add_argument(
        "--fake-gpus",
        action="store_true",
        default=os.environ.get("GPU_CHECK_FAKE_GPUS") == "1",
        help="a fake nvidia-smi with two GPUs: for testing this script without a card",
    )
    parser.add_argument(
        "--port-base", type=int, default=18600, help="api; +1 Redis; +100.. replicas"
    )
    parser.add_argument("--hold", type=float, default=20.0, help="seconds job (a) holds its GPUs")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per job")
    parser.add_argument("--keep", action="store_true", help="keep the DATA_DIR and logs")
    return parser.parse_args()


def tool_dir(args: argparse.Namespace) -> Path:
    """A directory the replicas' users can read: the interpreter wrapper, the fake."""
    tools = Path(tempfile.mkdtemp(prefix="cohort-gpu-check-"))
    tools.chmod(0o755)
    (tools / "bin").mkdir(mode=0o755)
    # Replicas get a clean environment (no PYTHONPATH) and run `python -m
    # workers.node.guard`: the wrapper gives their interpreter Cohort's code wherever it
    # was installed (pip --target included).
    import workers

    site = str(Path(workers.__file__).resolve().parents[1])
    wrapper = tools / "bin" / "replica-python"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{args.replica_python}" "$@"\n')
    wrapper.chmod(0o755)
    if args.fake_gpus:
        fake = tools / "bin" / "nvidia-smi"
        fake.write_text(FAKE_NVIDIA_SMI)
        fake.chmod(0o755)
    return tools


def host_gpus(path: str) -> list[tuple[str, str]]:
    """(index, uuid) of each GPU `nvidia-smi` lists on `path`."""
    smi = shutil.which("nvidia-smi", path=path)
    if smi is None:
        raise SystemExit("no nvidia-smi on PATH: not a GPU host (or try --fake-gpus)")
    done = subprocess.run(
        [smi, "--query-gpu=index,uuid", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rows = [[c.strip() for c in line.split(",")] for line in done.stdout.splitlines()]
    return [(row[0], row[1]) for row in rows if len(row) > 1]


def has_tensorflow(python: str) -> bool:
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('tensorflow') is None)"
    return subprocess.run([python, "-c", probe], check=False).returncode == 0


def stack_env(
    args: argparse.Namespace, tools: Path, data_dir: Path, token: str, gpus: int
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COHORT_")}
    env["PATH"] = f"{tools / 'bin'}{os.pathsep}{env.get('PATH', os.defpath)}"
    probe = has_tensorflow(args.replica_python)
    if not probe:
        say(
            f"TensorFlow is not installed for {args.replica_python}: the agent's TensorFlow "
            "GPU probe is off (COHORT_NODE_GPU_PROBE=false); GPUs are offered as NVML or "
            "nvidia-smi lists them"
        )
    env.update(
        COHORT_DATA_DIR=str(data_dir),
        COHORT_API_PORT=str(args.port_base),
        COHORT_EMBEDDED_REDIS_PORT=str(args.port_base + 1),
        COHORT_PORT_RANGE_START=str(args.port_base + 100),
        COHORT_PORT_RANGE_END=str(args.port_base + 199),
        COHORT_BOOTSTRAP_TOKEN=token,
        COHORT_NODE_ID="gpu-check",
        COHORT_NODE_GPUS=str(gpus),
        COHORT_NODE_GPU_PROBE="true" if probe else "false",
        COHORT_REPLICA_PYTHON=str(tools / "bin" / "replica-python"),
    )
    return env


# `cohort up` once started: a wait ends at once if it exits.
STACK: list[subprocess.Popen[bytes]] = []


def wait(what: str, predicate: Any, timeout: float, interval: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(process.poll() is not None for process in STACK):
            raise RuntimeError(f"`cohort up` exited while waiting for {what}")
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def job_spec(name: str, replicas: int, gpus: int, hold: float) -> dict[str, Any]:
    return {
        "name": name,
        "command": ["python", "-c", REPLICA, str(hold)],
        "replicas": replicas,
        "gpus_per_replica": gpus,
        "max_restarts": 0,
    }


def finished(client: Any, job_id: int, timeout: float) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        job: dict[str, Any] = client.job(job_id)
        return job if job["status"] in ("succeeded", "failed", "cancelled") else None

    result: dict[str, Any] = wait(f"job {job_id} to end", done, timeout)
    return result


def seen_by_replicas(client: Any, job: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """What each replica printed (its logs are shipped shortly after it ends)."""

    def read() -> dict[int, dict[str, Any]] | None:
        seen = {
            int(item["replica"]): json.loads(item["line"][len(MARK) :])
            for item in client.logs(job["id"], limit=1000)
            if item["line"].startswith(MARK)
        }
        return seen if len(seen) == job["replicas"] else None

    result: dict[int, dict[str, Any]] = wait(f"job {job['id']}'s replica logs", read, 60)
    return result


def run_jobs(client: Any, args: argparse.Namespace, n: int) -> tuple[list[dict[str, Any]], str]:
    """The three jobs, ended; and the reason (b) showed while (a) ran. `n` GPUs: (a) and
    (b) have n replicas of one GPU each, (c) one replica of n GPUs."""
    a = client.submit(job_spec("gpu-check-a", n, 1, args.hold))
    wait(
        "job a to run",
        lambda: client.job(a["id"])["status"] == "running",
        args.timeout,
    )
    b = client.submit(job_spec("gpu-check-b", n, 1, 0))

    def b_waits() -> str | None:
        seen = client.job(b["id"])
        return (
            seen["reason"] if seen["status"] == "queued" and "GPUs free" in seen["reason"] else None
        )

    waited = wait("job b to wait for GPUs", b_waits, 60)
    if client.job(a["id"])["status"] != "running":
        waited = f"(a ended before b was seen waiting) {waited}"
    ends = [finished(client, a["id"], args.timeout), finished(client, b["id"], args.timeout)]
    c = client.submit(job_spec("gpu-check-c", 1, n, 0))
    ends.append(finished(client, c["id"], args.timeout))
    return ends, waited


def check(
    jobs: list[dict[str, Any]],
    seen: list[dict[int, dict[str, Any]]],
    waited: str,
    gpus: dict[str, str],
) -> list[str]:
    """Every difference from what placement promises (none: the check passes)."""
    wrong: list[str] = []
    every = sorted(gpus.values())
    for job, saw in zip(jobs, seen, strict=True):
        name = job["name"]
        if job["status"] != "succeeded":
            wrong.append(f"{name}: {job['status']} ({job['reason']})")
        for index, replica in sorted(saw.items()):
            if replica["cuda_device_order"] != "PCI_BUS_ID":
                wrong.append(f"{name} r{index}: CUDA_DEVICE_ORDER={replica['cuda_device_order']}")
            if any(u not in every for u in replica["uuids"]):
                wrong.append(f"{name} r{index}: UUIDs {replica['uuids']} not among {every}")
            torch = replica.get("torch_devices")
            if torch is not None and torch != len(replica["uuids"]):
                wrong.append(f"{name} r{index}: CUDA shows PyTorch {torch} devices")
    for job, saw in zip(jobs[:2], seen[:2], strict=True):
        given = [tuple(r["uuids"]) for r in saw.values()]
        if any(len(g) != 1 for g in given) or len(set(given)) != len(given):
            wrong.append(f"{job['name']}: replicas should get one GPU each, all different: {given}")
    a, b = jobs[0], jobs[1]
    if "GPUs free" not in waited:
        wrong.append(f"gpu-check-b did not wait for GPUs: {waited}")
    a_end = max(r["finished_at"] or "" for r in a["replica_list"])
    b_start = min(r["started_at"] or "" for r in b["replica_list"])
    if not a_end or not b_start or b_start < a_end:
        wrong.append(f"gpu-check-b started at {b_start}, before a ended at {a_end}")
    c_given = sorted(seen[2][0]["uuids"]) if 0 in seen[2] else []
    if c_given != every:
        wrong.append(f"gpu-check-c should see every offered GPU {every}, saw {c_given}")
    return wrong


def report(jobs: list[dict[str, Any]], seen: list[dict[int, dict[str, Any]]]) -> None:
    row = "{:<13} {:>3} {:<10} {:<20} {:<18} {:<8} {}"
    say(
        row.format(
            "job", "rep", "status", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "torch", "UUIDs"
        )
    )
    for job, saw in zip(jobs, seen, strict=True):
        for index, r in sorted(saw.items()):
            torch = r.get("torch_devices")
            say(
                row.format(
                    job["name"],
                    index,
                    job["status"],
                    str(r["cuda_visible_devices"]),
                    str(r["cuda_device_order"]),
                    "-" if torch is None else str(torch),
                    ", ".join(r["uuids"]),
                )
            )


def start_stack(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "cli", "up"],
            cwd=log.parent,  # not the source tree: the installed Cohort runs
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_stack(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)  # `cohort up` stops all it started
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def main() -> int:
    args = parse_args()
    from cohort.client import Client

    tools = tool_dir(args)
    data_dir, log = tools / "data", tools / "cohort-up.log"
    token = secrets.token_urlsafe(32)
    listed = host_gpus(f"{tools / 'bin'}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
    say(f"nvidia-smi lists {len(listed)} GPUs: " + ", ".join(f"{i} {u}" for i, u in listed))
    if not listed:
        say("FAIL: the check needs a GPU")
        shutil.rmtree(tools, ignore_errors=True)
        return 1
    n = min(GPUS, len(listed))
    if n < GPUS:
        say(
            f"a {n}-GPU host: each job asks for {n} GPU(s); that two replicas get different "
            "GPUs is checked only on a host of two or more"
        )
    gpus = dict(listed[:n])
    env = stack_env(args, tools, data_dir, token, n)
    stack = start_stack(env, log)
    STACK.append(stack)
    failed = True
    try:
        client = Client(f"http://127.0.0.1:{args.port_base}", token)
        wait("the api", lambda: _ready(client), 120, 1.0)
        node = wait(
            "the node's GPUs",
            lambda: next((n for n in client.nodes() if n["status"] == "ready"), None),
            300,
        )
        say(f"node {node['id']} offers GPUs {node['gpu_ids']}: {node['gpu_devices']}")
        if node["gpus"] != n:
            say(f"FAIL: the node offers {node['gpus']} GPUs, not {n} (see {log})")
            return 1
        jobs, waited = run_jobs(client, args, n)
        seen = [seen_by_replicas(client, job) for job in jobs]
        say(f"gpu-check-b waited while gpu-check-a ran: {waited}")
        report(jobs, seen)
        say("GPU UUIDs: " + json.dumps(gpus))
        wrong = check(jobs, seen, waited, gpus)
        failed = bool(wrong)
        for line in wrong:
            say(f"FAIL: {line}")
        say("FAIL" if failed else "OK: every check holds")
    finally:
        stop_stack(stack)
        if failed or args.keep:
            say(f"logs: {log} and {data_dir}/logs")
        else:
            shutil.rmtree(tools, ignore_errors=True)
    return 1 if failed else 0


def _ready(client: Any) -> bool:
    try:
        client.wait_ready(timeout=1)
    except Exception:  # noqa: BLE001 - not up yet
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
