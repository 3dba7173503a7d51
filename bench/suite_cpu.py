"""Where the real-process tests' CPU goes: by process role, with and without coverage.

`make test` is bound by the 2-core machine's CPU in its real-process half (vmstat: 5-15 %
idle while it runs), so its time is the CPU its processes spend, halved. This runs a
selection of real-process tests (`--tests`, default: four small e2e files) under
`pytest -n 2 --dist loadfile`, as `make test` does, and reads every process on the machine
every 0.5 s (user + system CPU, psutil) to sum the CPU spent during the run by role:

* replica: a job's replica (`workers.replica.*`: the runner, a warm process), mostly
  TensorFlow's import and its start;
* api, scheduler, agent: the stacks' processes (`python -m cli api` ...);
* cli: the `cohort` commands a test runs; pytest: the xdist workers and their controller;
* postgres, redis, docker, other.

A process that lives under the 0.5 s between two reads is missed, and each process's last
half second is not counted: the figures are a floor, the same for both sides.

Sides, interleaved round by round (bench/rounds.py): `cov`, the tests with coverage on as
`make test` runs them (its subprocesses too), and `plain`, without. The median of the
per-round ratios of wall time and of CPU, and each side's CPU by role (the last round).

    .venv/bin/python bench/suite_cpu.py [--rounds 2] [--tests tests/e2e/test_x.py ...]

COHORT_TEST_REDIS and COHORT_TEST_PORT_BASE are passed on, as to any test run.
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rounds import interleaved, per_round_ratios, ratio_row  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TESTS = (
    "tests/e2e/test_follow_and_logs.py",
    "tests/e2e/test_two_replica_job.py",
    "tests/e2e/test_output_progress.py",
    "tests/e2e/test_replica_spec.py",
)
ROLES = (  # the first pattern that the command line matches names the role
    ("replica", re.compile(r"workers\.replica|pool_entry")),
    ("guard", re.compile(r"workers\.node\.guard")),
    ("api", re.compile(r"-m cli api\b")),
    ("scheduler", re.compile(r"-m cli scheduler\b")),
    ("agent", re.compile(r"-m cli agent\b")),
    ("pytest", re.compile(r"pytest|execnet|exec\(eval\(sys\.stdin")),
    ("cli", re.compile(r"-m cli |bin/cohort ")),
    ("postgres", re.compile(r"postgres")),
    ("redis", re.compile(r"redis-server")),
    ("docker", re.compile(r"dockerd|containerd|runc")),
)


def role(process: psutil.Process) -> str:
    try:
        line = " ".join(process.cmdline()) or process.name()
    except psutil.Error:
        return "other"
    return next((name for name, pattern in ROLES if pattern.search(line)), "other")


class Sampler:
    """Every process's CPU, read every `period` seconds, summed by role: what each process
    spent from the first read that saw it (or from the start, for one started since)."""

    def __init__(self, period: float = 0.5) -> None:
        self.period = period
        # (pid, start) -> its role, its CPU at the first read, at the last
        self.seen: dict[tuple[int, float], tuple[str, float, float]] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _read(self, first: bool) -> None:
        for process in psutil.process_iter():
            try:
                key = (process.pid, process.create_time())
                times = process.cpu_times()
            except psutil.Error:
                continue
            spent = times.user + times.system
            if key in self.seen:
                name, base, _ = self.seen[key]
                self.seen[key] = (name, base, spent)
            else:
                self.seen[key] = (role(process), spent if first else 0.0, spent)

    def _run(self) -> None:
        first = True
        while not self.stopped.wait(0 if first else self.period):
            self._read(first)
            first = False

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join()

    def by_role(self) -> dict[str, float]:
        spent: collections.defaultdict[str, float] = collections.defaultdict(float)
        for name, base, last in self.seen.values():
            spent[name] += last - base
        return dict(spent)


def run_tests(tests: list[str], coverage: bool, spent: dict[str, list[dict[str, float]]]) -> float:
    """One run of the tests; returns its wall time and appends its CPU by role."""
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2"]
    command += ["--dist", "loadfile", *(["--cov", "--cov-report="] if coverage else []), *tests]
    started = time.monotonic()
    with Sampler() as sampler:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    took = time.monotonic() - started
    if done.returncode != 0:
        sys.exit(f"the tests failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    spent["cov" if coverage else "plain"].append(sampler.by_role())
    return took


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tests", nargs="+", default=list(DEFAULT_TESTS))
    args = parser.parse_args()
    spent: dict[str, list[dict[str, float]]] = {"cov": [], "plain": []}
    walls = interleaved(
        {
            "cov": lambda: run_tests(args.tests, True, spent),
            "plain": lambda: run_tests(args.tests, False, spent),
        },
        args.rounds,
    )
    kept = {side: runs[1:] for side, runs in spent.items()}  # round 0: the warm-up
    cpu = {side: [sum(r.values()) for r in runs] for side, runs in kept.items()}
    print(f"\n{len(args.tests)} test files, {args.rounds} rounds; {', '.join(args.tests)}\n")
    print("| measure | median | rounds |\n|---|---:|---|")
    print(ratio_row("wall, cov / plain", per_round_ratios(walls, "cov", "plain")))
    print(ratio_row("CPU, cov / plain", per_round_ratios(cpu, "cov", "plain")))
    for side in ("cov", "plain"):
        shown = ", ".join(f"{c:.1f}" for c in cpu[side])
        print(f"| CPU-s, {side} | {statistics.median(cpu[side]):.1f} | {shown} |")
    last = {side: runs[-1] for side, runs in kept.items()}
    names = sorted(last["cov"], key=lambda name: -last["cov"][name])
    print("\n| role (last round) | cov CPU-s | plain CPU-s |\n|---|---:|---:|")
    for name in names:
        print(f"| {name} | {last['cov'][name]:.1f} | {last['plain'].get(name, 0.0):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
