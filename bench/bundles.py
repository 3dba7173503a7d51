"""What a code bundle upload costs: pack, HEAD + PUT to a real api process, and a second
push of the same tree (HEAD only); with the api's peak memory during the upload, which
stays flat because the body is streamed to disk, never held whole.

Bundles of random (incompressible) bytes, 10 MB and 100 MB by default; SQLite and the
directory store under a temporary DATA_DIR (S3: set COHORT_ARTIFACT_URL and friends).

    .venv/bin/python bench/bundles.py [--sizes 10,100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli.client import CohortClient  # noqa: E402
from cli.stack import Stack  # noqa: E402
from services.storage.bundles import pack  # noqa: E402
from tests.e2e.conftest import free_port  # noqa: E402


def tree(root: Path, megabytes: int) -> Path:
    """A directory of `megabytes` MB of random bytes in 1 MB files, plus a script."""
    root.mkdir(parents=True)
    (root / "train.py").write_text("print('hello')\n")
    for i in range(megabytes):
        (root / f"shard-{i:04d}.bin").write_bytes(os.urandom(1_000_000))
    return root


class PeakRss(threading.Thread):
    """The peak resident memory of a process (and its children) while running."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.peak = 0
        self.running = True

    def rss(self) -> int:
        procs = [self.process, *self.process.children(recursive=True)]
        return sum(p.memory_info().rss for p in procs if p.is_running())

    def run(self) -> None:
        while self.running:
            self.peak = max(self.peak, self.rss())
            time.sleep(0.02)


def one_size(client: CohortClient, api_pid: int, tmp: Path, megabytes: int,
             repeat: int) -> dict[str, float]:
    packs, puts, heads, peaks = [], [], [], []
    for attempt in range(repeat):
        code = tree(tmp / f"code-{megabytes}-{attempt}", megabytes)
        archive = tmp / f"b-{megabytes}-{attempt}.tar.gz"
        started = time.perf_counter()
        info = pack(code, archive)
        packs.append(time.perf_counter() - started)
        watcher = PeakRss(api_pid)
        before = watcher.rss()
        watcher.start()
        started = time.perf_counter()
        assert not client.has_bundle(info.digest)
        client.upload_bundle(info.digest, archive)
        puts.append(time.perf_counter() - started)
        watcher.running = False
        watcher.join()
        peaks.append((watcher.peak - before) / 2**20)
        started = time.perf_counter()
        assert client.has_bundle(info.digest)  # the second push: nothing is sent
        heads.append(time.perf_counter() - started)
    return {"pack_s": statistics.median(packs), "head_put_s": statistics.median(puts),
            "again_s": statistics.median(heads), "api_rss_growth_mib": max(peaks)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100", help="bundle sizes in MB")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cohort-bench-bundles-") as scratch:
        tmp = Path(scratch)
        stack = Stack({"COHORT_DATABASE_URL": "", "COHORT_DATA_DIR": str(tmp / "data"),
                       "COHORT_REDIS_URL": os.environ.get("COHORT_REDIS_URL", ""),
                       "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
                       "COHORT_API_PORT": str(free_port())}, quiet=True)
        stack.start(parts=("api",))
        try:
            client = CohortClient(stack.url, stack.token, timeout=300)
            print(f"# {platform.node()} {platform.processor() or platform.machine()}, "
                  f"{os.cpu_count()} cores; api on SQLite and a directory store; "
                  f"median of {args.repeat}")
            print("| bundle | pack | HEAD + PUT | MB/s | push again (HEAD) | api memory growth |")
            print("|---|---|---|---|---|---|")
            for megabytes in (int(s) for s in args.sizes.split(",")):
                r = one_size(client, stack.child("api").pid, tmp, megabytes, args.repeat)
                print(f"| {megabytes} MB | {r['pack_s']:.2f} s | {r['head_put_s']:.2f} s | "
                      f"{megabytes / r['head_put_s']:.0f} | {r['again_s'] * 1000:.1f} ms | "
                      f"{r['api_rss_growth_mib']:.1f} MiB |")
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
