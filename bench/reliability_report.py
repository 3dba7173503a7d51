"""Render the fault tests' own measurements (test-artifacts/reliability.jsonl) as the
table in docs/reliability.md.

    .venv/bin/python -m pytest -q tests/faults && .venv/bin/python bench/reliability_report.py
"""

from __future__ import annotations

import json
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent / "test-artifacts" / "reliability.jsonl"


def seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f} s"


def main() -> None:
    rows = [json.loads(line) for line in SOURCE.read_text().splitlines() if line.strip()]
    latest: dict[str, dict[str, object]] = {}
    for row in rows:  # the last run of each fault
        latest[str(row["fault"])] = row
    print("| fault | what Cohort did | time to detect | time to recover | what was lost |")
    print("|---|---|---|---|---|")
    for row in latest.values():
        print(f"| {row['fault']} | {row['action']} | {seconds(row['detect_s'])} "  # type: ignore[arg-type]
              f"| {seconds(row['recover_s'])} | {row['lost']} |")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
