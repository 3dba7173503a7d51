"""What checking a large bundle costs the api, and whether other requests wait on it.

One client (project A) uploads a bundle of 100 MB compressed (random bytes: it does not
compress, so the api reads and checks all of it) round after round, a new bundle each
round; another project's client (B) meanwhile submits jobs (`POST /api/v1/jobs`) and
reads `/healthz` in turn, each request timed. Each round has a window with A's upload
and one as long without it, in alternating order.

Reported: the upload's api time (the PUT, sent to answered; median over the rounds), the
same PUT again (a 200: received and hashed, neither checked nor stored) and
`check_archive` alone on the same file in this process; B's p50/p99 without and with
the upload, and the median of the per-round ratios; how many of B's requests during
uploads took over a second or were refused. The stack is the default one on SQLite (the
api and the scheduler, the processes that write to it; no agent, so B's jobs stay
queued).

    .venv/bin/python bench/bundle_check.py [--rounds 5] [--megabytes 100] [--zeros]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import platform
import statistics
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.stack import Stack  # noqa: E402
from services.storage.bundles import Limits, check_archive  # noqa: E402
from tests.e2e.conftest import free_port  # noqa: E402
from tests.hostile_bundles import Zeros  # noqa: E402

JOB = {"name": "beside-the-upload", "trainer": "mlp_digits", "replicas": 1}
SLOW = 1.0  # seconds: a request of B's this long waited on something


def make_bundle(path: Path, megabytes: int, round_no: int, zeros: bool) -> str:
    """A .tar.gz of a file naming the round and `megabytes` MB of random bytes (gzip level
    1: they do not compress at any level), or of zeros (level 9: a bomb a thousandth of
    its unpacked size); its digest."""
    size = megabytes * 1_000_000
    payload = io.BufferedReader(Zeros(size), 1 << 20) if zeros else io.BytesIO(os.urandom(size))
    with tarfile.open(path, "w:gz", compresslevel=9 if zeros else 1) as tar:
        stamp = f"{round_no}\n".encode()
        for name, length, data in (
            ("round.txt", len(stamp), io.BytesIO(stamp)),
            ("weights.bin", size, payload),
        ):
            info = tarfile.TarInfo(name)
            info.size, info.mode = length, 0o644
            tar.addfile(info, data)
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


class Prober(threading.Thread):
    """B's requests, one after another, a job submission and a /healthz in turn; each
    recorded as (started, kind, seconds, status)."""

    def __init__(self, url: str, token: str) -> None:
        super().__init__(daemon=True)
        self.client = httpx.Client(
            base_url=url, timeout=120, headers={"Authorization": f"Bearer {token}"}
        )
        self.records: list[tuple[float, str, float, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with self.client:
            while not self.stop.is_set():
                for kind in ("submit", "healthz"):
                    started = time.monotonic()
                    response = (
                        self.client.post("/api/v1/jobs", json=JOB)
                        if kind == "submit"
                        else self.client.get("/healthz")
                    )
                    self.records.append(
                        (started, kind, time.monotonic() - started, response.status_code)
                    )
                self.stop.wait(0.02)

    def window(self, start: float, end: float) -> list[tuple[float, str, float, int]]:
        return [r for r in list(self.records) if start <= r[0] and r[0] + r[2] <= end]


def percentile(values: list[float], q: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def new_token(stack: Stack, project: str) -> str:
    response = httpx.post(
        f"{stack.url}/api/v1/tokens",
        timeout=30,
        headers={"Authorization": f"Bearer {stack.token}"},
        json={"project": project, "name": "bench", "scopes": ["read", "submit"]},
    )
    response.raise_for_status()
    return str(response.json()["token"])


def run_rounds(stack: Stack, bundles: list[tuple[Path, str]]) -> list[dict[str, float]]:
    """Each round: a window with A's upload and one as long without, alternating which
    comes first; B's figures in each."""
    a = {"Authorization": f"Bearer {new_token(stack, 'bench-a')}"}
    prober = Prober(stack.url, new_token(stack, "bench-b"))
    prober.start()
    time.sleep(2.0)  # B warmed up
    rounds = []
    try:
        for number, (path, digest) in enumerate(bundles):
            body = path.read_bytes()
            figures: dict[str, float] = {}
            for phase in ("upload", "quiet") if number % 2 else ("quiet", "upload"):
                start = time.monotonic()
                if phase == "upload":
                    response = httpx.put(
                        f"{stack.url}/api/v1/bundles/{digest}", content=body, headers=a, timeout=600
                    )
                    assert response.status_code == 201, response.text
                    figures["put_s"] = time.monotonic() - start
                else:
                    time.sleep(figures.get("put_s", 2.0))
                end = time.monotonic()
                for kind in ("submit", "healthz"):
                    records = [r for r in prober.window(start, end) if r[1] == kind]
                    seconds = [r[2] for r in records]
                    figures[f"{phase}_{kind}_p50"] = percentile(seconds, 50)
                    figures[f"{phase}_{kind}_p99"] = percentile(seconds, 99)
                    figures[f"{phase}_{kind}_n"] = len(records)
                    figures[f"{phase}_{kind}_slow"] = sum(
                        1 for r in records if r[2] > SLOW or r[3] >= 300
                    )
            # The same bytes again: a 200, received and hashed but neither checked nor
            # stored, so the difference is what the check, the store and the record take.
            start = time.monotonic()
            response = httpx.put(
                f"{stack.url}/api/v1/bundles/{digest}", content=body, headers=a, timeout=600
            )
            assert response.status_code == 200, response.text
            figures["again_s"] = time.monotonic() - start
            rounds.append(figures)
    finally:
        prober.stop.set()
        prober.join(timeout=120)
    return rounds


def report(rounds: list[dict[str, float]], check_s: float, bundle: str) -> None:
    med = statistics.median
    put, again = med(r["put_s"] for r in rounds), med(r["again_s"] for r in rounds)
    print(
        f"# {platform.node()}, {os.cpu_count()} cores; api on SQLite; {len(rounds)} rounds; "
        f"bundle: {bundle}"
    )
    print(
        f"upload (PUT, sent to answered), median: {put:.2f} s; the same bytes again (200: "
        f"received and hashed only): {again:.2f} s; check_archive alone in this process: "
        f"{check_s:.2f} s"
    )
    print(
        "| B's request | p50 quiet | p50 during upload | ratio | p99 quiet "
        "| p99 during upload | ratio | during uploads: over 1 s or refused |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for kind in ("submit", "healthz"):
        cells = []
        for q in ("p50", "p99"):
            quiet = med(r[f"quiet_{kind}_{q}"] for r in rounds)
            busy = med(r[f"upload_{kind}_{q}"] for r in rounds)
            ratio = med(r[f"upload_{kind}_{q}"] / r[f"quiet_{kind}_{q}"] for r in rounds)
            cells += [f"{quiet * 1000:.1f} ms", f"{busy * 1000:.1f} ms", f"{ratio:.2f}x"]
        slow = sum(int(r[f"upload_{kind}_slow"]) for r in rounds)
        total = sum(int(r[f"upload_{kind}_n"]) for r in rounds)
        print(f"| {kind} | " + " | ".join(cells) + f" | {slow} of {total} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument(
        "--zeros",
        action="store_true",
        help="a bundle of zeros (a bomb: "
        "--megabytes 1000 is about 1 MB sent) instead of random bytes",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cohort-bench-bundle-check-") as scratch:
        tmp = Path(scratch)
        bundles = []
        for number in range(args.rounds):
            path = tmp / f"bundle-{number}.tar.gz"
            bundles.append((path, make_bundle(path, args.megabytes, number, args.zeros)))
        limit = 2 * args.megabytes * 1_000_000 + (1 << 20)  # every bundle is accepted
        started = time.perf_counter()
        check_archive(bundles[0][0], Limits(max_unpacked_bytes=limit))
        check_s = time.perf_counter() - started
        stack = Stack(
            {
                "COHORT_DATABASE_URL": "",
                "COHORT_REDIS_URL": "",
                "COHORT_DATA_DIR": str(tmp / "var"),
                "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
                "COHORT_API_PORT": str(free_port()),
                "COHORT_MAX_BUNDLE_UNPACKED_BYTES": str(limit),
                "COHORT_QUOTA_MAX_QUEUED_JOBS": "100000",
            },
            quiet=True,
        )
        stack.start(parts=("api", "scheduler"))
        try:
            rounds = run_rounds(stack, bundles)
        finally:
            stack.stop()
        report(
            rounds,
            check_s,
            f"{args.megabytes} MB of " + ("zeros (unpacked)" if args.zeros else "random bytes"),
        )


if __name__ == "__main__":
    main()
