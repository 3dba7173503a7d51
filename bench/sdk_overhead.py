"""The Python SDK's cost per call against raw HTTP, on a real `cohort api`.

One api process (`cohort up`'s, on the embedded defaults: SQLite and Redis under a
scratch DATA_DIR) and one submitted job. Each round times CALLS reads of the job both
ways, interleaved (raw, SDK, raw, SDK, ... so both see the same machine): raw is
`httpx.Client.get(...).json()` with the same connection settings; SDK is
`cohort.Client.job(id)`, which also checks the answer against the API's schema into a
typed `Job`. Reported: the median of per-round ratios SDK/raw, the median per-call
difference in microseconds, and the cost of the typed answer alone (JobRead validation
of the same JSON, no I/O).

    .venv/bin/python bench/sdk_overhead.py [--rounds 15] [--calls 200]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.stack import Stack  # noqa: E402
from cohort.api_models import JobRead  # noqa: E402
from cohort.client import Client  # noqa: E402

TOKEN = "bench-sdk-overhead-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def timed(fn: object, calls: int) -> float:
    assert callable(fn)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cohort-bench-sdk-") as scratch:
        stack = Stack(
            {
                "COHORT_DATABASE_URL": "",
                "COHORT_REDIS_URL": "",
                "COHORT_DATA_DIR": str(Path(scratch) / "data"),
                "COHORT_API_PORT": str(free_port()),
                "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
                "COHORT_BOOTSTRAP_TOKEN": TOKEN,
            },
            quiet=True,
        )
        stack.start(("api",))
        try:
            run(stack.url, args.rounds, args.calls)
        finally:
            stack.stop()


def run(url: str, rounds: int, calls: int) -> None:
    sdk = Client(url, TOKEN)
    raw = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30.0)
    job_id = sdk.submit({"name": "bench", "command": ["python", "-c", "pass"]}).id
    path = f"/api/v1/jobs/{job_id}"
    body = raw.get(path).json()
    for _ in range(50):  # warm both: connections open, code paths compiled
        raw.get(path).json()
        sdk.job(job_id)
    ratios, deltas = [], []
    for _ in range(rounds):
        raw_s = timed(lambda: raw.get(path).json(), calls)
        sdk_s = timed(lambda: sdk.job(job_id), calls)
        ratios.append(sdk_s / raw_s)
        deltas.append((sdk_s - raw_s) * 1e6)
    parse_us = timed(lambda: JobRead.model_validate(body), 2000) * 1e6
    print(f"rounds {rounds} x {calls} calls, GET {path} (one job)")
    print(f"SDK / raw httpx per call: median of per-round ratios {statistics.median(ratios):.3f}x")
    print(f"  per-round ratios: {', '.join(f'{r:.3f}' for r in ratios)}")
    print(f"SDK - raw per call: median {statistics.median(deltas):.0f} us")
    print(f"the typed answer alone (JobRead validation, no I/O): {parse_us:.0f} us")
    sdk.close()
    raw.close()


if __name__ == "__main__":
    main()
