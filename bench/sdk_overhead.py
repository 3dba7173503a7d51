"""The Python SDK's cost per call against raw HTTP, on a real `cohort api`.

One api process (`cohort up`'s, on the embedded defaults: SQLite and Redis under a
scratch DATA_DIR) and one submitted job. Each round times CALLS reads of the job both
ways, interleaved (raw, SDK, raw, SDK, ... so both see the same machine): raw is
`httpx.Client.get(...).json()` with the same connection settings; SDK is
`cohort.Client.job(id)`, which also checks the answer against the API's schema into a
typed `Job`. Reported: the median of per-round ratios SDK/raw of the wall time and of
this process's CPU (the client's side alone; the api's work is the same both ways), and,
without I/O, the cost of the typed answer alone (JobRead validation) and of all the
SDK's own work on an answer (the call built, the answer checked into a Job).

    .venv/bin/python bench/sdk_overhead.py [--rounds 15] [--calls 200]
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.stack import Stack  # noqa: E402
from cohort import calls as sdk_calls  # noqa: E402
from cohort.api_models import JobRead  # noqa: E402
from cohort.client import Client  # noqa: E402
from cohort.jobs import Job  # noqa: E402
from cohort.transport import answer  # noqa: E402

TOKEN = "bench-sdk-overhead-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def timed(fn: object, calls: int) -> tuple[float, float]:
    """Seconds per call: wall time, and this process's CPU (the client's own work, the
    api server's excluded)."""
    assert callable(fn)
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls


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
    ratios, cpu_ratios, cpu_deltas = [], [], []
    for _ in range(rounds):
        raw_wall, raw_cpu = timed(lambda: raw.get(path).json(), calls)
        sdk_wall, sdk_cpu = timed(lambda: sdk.job(job_id), calls)
        ratios.append(sdk_wall / raw_wall)
        cpu_ratios.append(sdk_cpu / raw_cpu)
        cpu_deltas.append((sdk_cpu - raw_cpu) * 1e6)
    parse_us = timed(lambda: JobRead.model_validate(body), 2000)[1] * 1e6
    # The SDK's own work on an answer already received: the call built, the answer
    # checked into a Job (httpx's own parse of the body taken off).
    answered = raw.get(path)
    own = timed(lambda: Job.bind(sdk, answer(sdk_calls.job(job_id), answered, None)), 2000)[1]
    own_us = (own - timed(answered.json, 2000)[1]) * 1e6
    print(f"rounds {rounds} x {calls} calls, GET {path} (one job)")
    print(f"wall per call, SDK / raw httpx: median of per-round ratios {median(ratios):.3f}x")
    print(f"  per-round ratios: {', '.join(f'{r:.3f}' for r in ratios)}")
    print(
        f"client CPU per call, SDK / raw: median of per-round ratios "
        f"{median(cpu_ratios):.3f}x, SDK - raw median {median(cpu_deltas):.0f} us"
    )
    print(f"  per-round ratios: {', '.join(f'{r:.3f}' for r in cpu_ratios)}")
    print(f"the typed answer alone (JobRead validation, no I/O): {parse_us:.0f} us CPU")
    print(f"the SDK's own work per call (call, check, Job; no I/O): {own_us:.0f} us CPU")
    sdk.close()
    raw.close()


if __name__ == "__main__":
    main()
