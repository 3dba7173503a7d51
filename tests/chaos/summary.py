"""A soak's result: the table it prints, and the record docs/reliability.md is written from
(a line of test-artifacts/reliability.jsonl with "kind": "soak", read by
bench/reliability_report.py)."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos.faults import FAULT_KINDS
from tests.chaos.invariants import CHECKS, Violation

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
OUTCOMES = ("succeeded", "failed", "cancelled")


@dataclass
class SoakResult:
    jobs: int
    agents: int
    seed: int
    pool: int = 0  # warm replica processes per agent
    seconds: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    restarted: int = 0  # jobs that ran more than one attempt
    cancels_asked: int = 0
    exited: Counter[str] = field(default_factory=Counter)  # parts that exited by themselves
    violations: list[Violation] = field(default_factory=list)

    def by_check(self) -> dict[str, int]:
        counted = Counter(v.check for v in self.violations)
        return {check: counted.get(check, 0) for check in CHECKS}

    def table(self) -> str:
        """What the soak prints: faults by kind, jobs by outcome, violations by check."""
        width = max(len(k) for k in (*FAULT_KINDS, *CHECKS)) + 2
        lines = [
            f"chaos soak: {self.jobs} jobs on {self.agents} agents"
            f"{f', a warm pool of {self.pool} each' if self.pool else ''}, seed {self.seed}, "
            f"{self.seconds:.0f} s",
            "",
            "faults injected",
        ]
        lines += [f"  {kind:<{width}}{self.faults.get(kind, 0):>5}" for kind in FAULT_KINDS]
        lines += [f"  {'total':<{width}}{sum(self.faults.values()):>5}"]
        lines += [
            f"  ({name} exited by itself, started again: {n})"
            for name, n in sorted(self.exited.items())
        ]
        lines += ["", "jobs by outcome"]
        outcomes = [*OUTCOMES, *sorted(set(self.outcomes) - set(OUTCOMES))]
        lines += [f"  {o:<{width}}{self.outcomes.get(o, 0):>5}" for o in outcomes]
        lines += [
            f"  {'(ran more than one attempt)':<{width}}{self.restarted:>5}",
            f"  {'(cancel asked)':<{width}}{self.cancels_asked:>5}",
            "",
            "invariant violations (must be 0)",
        ]
        lines += [f"  {check:<{width}}{n:>5}" for check, n in self.by_check().items()]
        lines += [f"  {'total':<{width}}{len(self.violations):>5}"]
        if self.violations:
            lines += ["", "violations:"] + [f"  {v}" for v in self.violations[:50]]
        return "\n".join(lines)

    def record(self) -> dict[str, Any]:
        return {
            "kind": "soak",
            "jobs": self.jobs,
            "agents": self.agents,
            "seed": self.seed,
            "pool": self.pool,
            "seconds": round(self.seconds, 1),
            "faults": {k: self.faults.get(k, 0) for k in FAULT_KINDS},
            "outcomes": {
                o: self.outcomes.get(o, 0)
                for o in [*OUTCOMES, *sorted(set(self.outcomes) - set(OUTCOMES))]
            },
            "restarted": self.restarted,
            "cancels_asked": self.cancels_asked,
            "exited_by_themselves": dict(self.exited),
            "violations": self.by_check(),
            "examples": [str(v) for v in self.violations[:10]],
            "at": time.strftime("%Y-%m-%d %H:%M:%S"),
            "load": round(os.getloadavg()[0], 1),
        }

    def save(self, directory: Path = ARTIFACTS) -> None:
        """Append this run's record to test-artifacts/reliability.jsonl."""
        directory.mkdir(exist_ok=True)
        with open(directory / "reliability.jsonl", "a") as handle:
            handle.write(json.dumps(self.record()) + "\n")
