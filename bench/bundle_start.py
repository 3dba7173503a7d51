"""Time from submit to first step of a `command` job: a bundle the node has not seen
(cold cache) vs. the same bundle again (warm cache) vs. a new bundle with one byte changed.

A local stack (embedded SQLite + Redis, one agent). The bundle is a `train.py` that
imports TensorFlow (what a real script pays before its first step) and reports step 1 with
`cohort.report()`, plus `--megabytes` of random bytes; it is uploaded before the POST
(uploads are bench/bundles.py's), so the clock runs from the POST to the step as the
script stamped it. Each round submits: (cold) a new bundle, (warm) the same bundle
again, (new) that bundle with one byte changed; medians over the rounds. The part the
bundle changes is scheduled -> spawned: the agent fetches and unpacks it before the spawn.

    .venv/bin/python bench/bundle_start.py [--rounds 3] [--megabytes 100] [--replicas 1]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.stack import Stack  # noqa: E402
from cohort.bundles import pack  # noqa: E402
from cohort.client import Client  # noqa: E402
from services.statuses import TERMINAL_STATUSES  # noqa: E402
from tests.e2e.conftest import free_port  # noqa: E402

TRAIN = "import tensorflow as tf\nfrom cohort import report\n\nreport(1, loss=1.0)\n"
KINDS = ("cold", "warm", "new")


def stamp(value: str) -> float:
    return dt.datetime.fromisoformat(value).timestamp()


def push(client: Client, code: Path, archive: Path) -> str:
    info = pack(code, archive)
    if not client.has_bundle(info.digest):
        client.upload_bundle(info.digest, archive)
    return info.digest


def run_job(client: Client, digest: str, replicas: int) -> dict[str, float]:
    """Submit the job naming `digest`; seconds from the POST to each milestone."""
    t0 = time.time()
    job = client.submit(
        {
            "name": "bench-start",
            "bundle": digest,
            "replicas": replicas,
            "command": ["python", "train.py"],
            "restart_policy": "never",
            "strategy": "multi_worker_mirrored" if replicas > 1 else "one_device",
        }
    )
    while job["status"] not in TERMINAL_STATUSES:
        time.sleep(0.05)
        job = client.job(job["id"])
    if job["status"] != "succeeded":
        raise RuntimeError(f"job {job['id']} {job['status']}: {job['reason']}")
    first = min(p["ts"] for p in client.metrics(job["id"], name=["loss"]))
    scheduled = next(
        stamp(e["created_at"]) for e in client.events(job["id"]) if e["to_status"] == "scheduled"
    )
    spawned = max(stamp(r["started_at"]) for r in job["replica_list"])
    return {
        "submit -> first step": first - t0,
        "submit -> scheduled": scheduled - t0,
        "scheduled -> spawned": spawned - scheduled,
        "spawned -> first step": first - spawned,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=1)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory(prefix="cohort-bench-start-") as scratch:
        tmp = Path(scratch)
        stack = Stack(
            {
                "COHORT_DATA_DIR": str(tmp / "var"),
                "COHORT_DATABASE_URL": "",
                "COHORT_REDIS_URL": "",
                "COHORT_API_PORT": str(free_port()),
                "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
                "COHORT_PORT_RANGE_START": os.environ.get("COHORT_TEST_PORT_BASE", "29500"),
            },
            quiet=True,
        )
        stack.start()
        try:
            client = Client(stack.url, stack.token, timeout=300)
            for round_ in range(args.rounds):
                code = tmp / f"code-{round_}"
                code.mkdir()
                (code / "train.py").write_text(TRAIN)
                blob = bytearray(os.urandom(args.megabytes * 1_000_000))
                (code / "data.bin").write_bytes(blob)
                digest = push(client, code, tmp / "a.tar.gz")
                results["cold"].append(run_job(client, digest, args.replicas))
                results["warm"].append(run_job(client, digest, args.replicas))
                blob[len(blob) // 2] ^= 1  # one byte changed: a new digest
                (code / "data.bin").write_bytes(blob)
                changed = push(client, code, tmp / "b.tar.gz")
                results["new"].append(run_job(client, changed, args.replicas))
                print(
                    f"round {round_ + 1}: "
                    + ", ".join(
                        f"{k} {results[k][-1]['submit -> first step']:.2f} s" for k in KINDS
                    ),
                    flush=True,
                )
        finally:
            stack.stop()
    print(
        f"\n# {platform.node()} {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"{args.replicas} replica(s), a {args.megabytes} MB bundle; "
        f"median of {args.rounds} rounds"
    )
    print(
        "| median | cold (new bundle) | warm (same bundle) | new (one byte changed) | cold − warm |"
    )
    print("|---|---|---|---|---|")
    for key in results["cold"][0]:
        cold, warm, new = (statistics.median(r[key] for r in results[k]) for k in KINDS)
        print(f"| {key} | {cold:.2f} s | {warm:.2f} s | {new:.2f} s | {cold - warm:+.2f} s |")


if __name__ == "__main__":
    main()
