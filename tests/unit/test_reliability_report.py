"""docs/reliability.md's table comes from the fault tests' own measurements
(bench/reliability_report.py): a row for every fault the tests record, the newest
measurement of each, the prose around it untouched; and the committed document has a row
for every fault the tests record today, each row's figures those of the record kept beside
it (docs/reliability-records.jsonl, written with the table), so the table cannot drift from
the tests nor be edited by hand. The chaos soak's table (tests/chaos) comes from the soak's
own records, beside the fault rows in the same file, and the committed one shows a run that
broke no invariant."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.reliability_report import (  # noqa: E402
    DOCUMENT,
    END,
    RECORDS,
    SOAK_END,
    SOAK_START,
    START,
    keep_records,
    latest_rows,
    latest_soaks,
    recorded_faults,
    render,
    render_soak,
    write,
)


def rows(path: Path, *measured: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in measured))
    return path


def row(fault: str, recover: float | None, at: str, load: float = 1.0) -> dict[str, object]:
    return {
        "fault": fault,
        "action": f"handled {fault}",
        "detect_s": None,
        "recover_s": recover,
        "lost": "nothing",
        "at": at,
        "load": load,
    }


def test_the_newest_measurement_of_each_fault_in_the_tests_order(tmp_path: Path) -> None:
    source = rows(
        tmp_path / "r.jsonl",
        row("b", 9.0, "2026-01-01 10:00:00"),
        row("named at run time", None, "2026-01-01 10:00:30"),
        row("a", 1.25, "2026-01-01 10:01:00", load=3.5),
        row("b", 2.0, "2026-01-01 10:02:00"),
    )
    table = render(latest_rows(source), ["b", "a"]).splitlines()
    assert table[0].startswith("Measured 2026-01-01 10:00:30 – 2026-01-01 10:02:00")
    assert "load average 1.0–3.5" in table[0]
    assert table[-3:] == [
        "| b | handled b | — | 2.0 s | nothing |",
        "| a | handled a | — | 1.2 s | nothing |",
        "| named at run time | handled named at run time | — | — | nothing |",
    ]


def test_a_fault_without_a_measurement_is_refused(tmp_path: Path) -> None:
    source = rows(tmp_path / "r.jsonl", row("a", 1.0, "2026-01-01 10:00:00"))
    with pytest.raises(SystemExit, match="no measurement for: b"):
        render(latest_rows(source), ["a", "b"])


def test_writing_replaces_the_table_alone(tmp_path: Path) -> None:
    document = tmp_path / "doc.md"
    document.write_text(f"# Title\nprose before\n{START}\nold table\n{END}\nprose after\n")
    write(document, "new table")
    assert (
        document.read_text() == f"# Title\nprose before\n{START}\nnew table\n{END}\nprose after\n"
    )
    without = tmp_path / "plain.md"
    without.write_text("no markers")
    with pytest.raises(SystemExit, match="markers"):
        write(without, "t")


def test_the_document_has_a_row_for_every_fault_the_tests_record() -> None:
    faults = recorded_faults()
    assert len(faults) >= 10, faults  # the parser still finds the fault tests' records
    text = DOCUMENT.read_text()
    table = text.split(START, 1)[1].split(END, 1)[0]
    missing = [fault for fault in faults if f"| {fault} |" not in table]
    assert not missing, (
        f"docs/reliability.md lacks rows for these faults; run `make reliability-report`: {missing}"
    )


def soak(jobs: int, seed: int, at: str, **violations: int) -> dict[str, object]:
    return {
        "kind": "soak",
        "jobs": jobs,
        "agents": 3,
        "seed": seed,
        "seconds": 241.6,
        "faults": {"replica SIGKILL": 3, "Redis restart (empty)": 2},
        "outcomes": {"succeeded": 8, "failed": 3, "cancelled": 1},
        "restarted": 4,
        "cancels_asked": 2,
        "violations": {"leftover": 0, "overlap": 0, **violations},
        "examples": [],
        "at": at,
        "load": 3.5,
    }


def test_soak_records_have_a_table_of_their_own_the_newest_run_of_each_size(tmp_path: Path) -> None:
    """A small soak (CI's) keeps only its newest run; every full-size soak (200 jobs) keeps
    a row per seed, and a warm-pool soak is a size of its own."""
    source = rows(
        tmp_path / "r.jsonl",
        soak(200, 1, "2026-01-01 09:00:00", overlap=2),
        soak(12, 5, "2026-01-01 09:30:00"),
        row("a", 1.0, "2026-01-01 10:00:00"),
        soak(12, 2, "2026-01-01 10:05:00"),
        soak(200, 3, "2026-01-01 11:00:00"),
        {**soak(200, 3, "2026-01-01 12:00:00"), "pool": 2},
    )
    assert list(latest_rows(source)) == ["a"]  # the soak is no fault row
    runs = latest_soaks(source)
    assert [(r["jobs"], r["seed"], r.get("pool", 0)) for r in runs] == [
        (12, 2, 0),
        (200, 1, 0),
        (200, 3, 0),
        (200, 3, 2),
    ]
    assert "200 jobs on 3 agents (a warm pool of 2 each), seed 3: " in render_soak(runs[3:])
    table = render_soak(runs).splitlines()
    assert table[0] == (
        "| run | faults injected by kind | jobs by outcome | invariant violations |"
    )
    assert table[2] == (
        "| 12 jobs on 3 agents, seed 2: 242 s, 2026-01-01 10:05:00, load 3.5 | "
        "replica SIGKILL: 3; Redis restart (empty): 2 (total 5) | "
        "succeeded: 8; failed: 3; cancelled: 1 (4 ran more than one attempt, 2 cancels "
        "asked) | 0 (of 2 checks) |"
    )
    assert len(table) == 2 + len(runs)
    exited = render_soak([{**runs[0], "exited_by_themselves": {"api": 1}}]).splitlines()[2]
    assert "(total 5); exited by themselves, started again: api: 1 |" in exited


def test_a_soak_that_broke_an_invariant_says_which(tmp_path: Path) -> None:
    runs = latest_soaks(rows(tmp_path / "r.jsonl", soak(12, 4, "2026-01-01 10:05:00", overlap=2)))
    assert render_soak(runs).splitlines()[-1].endswith("| 2: overlap: 2 |")


def test_writing_the_soak_table_leaves_the_fault_table_alone(tmp_path: Path) -> None:
    document = tmp_path / "doc.md"
    document.write_text(f"{START}\nfaults\n{END}\nprose\n{SOAK_START}\nold\n{SOAK_END}\n")
    write(document, "new soak", SOAK_START, SOAK_END)
    assert (
        document.read_text()
        == f"{START}\nfaults\n{END}\nprose\n{SOAK_START}\nnew soak\n{SOAK_END}\n"
    )


def test_the_document_shows_a_soak_run_that_broke_no_invariant() -> None:
    text = DOCUMENT.read_text()
    table = text.split(SOAK_START, 1)[1].split(SOAK_END, 1)[0].strip().splitlines()
    runs = table[2:]
    assert runs, (
        "docs/reliability.md has no chaos soak run; run tests/chaos, then "
        "bench/reliability_report.py --write"
    )
    for run in runs:
        assert run.split(" | ")[-1].startswith("0 ("), run


def table_of(text: str, start: str, end: str) -> list[str]:
    return text.split(start, 1)[1].split(end, 1)[0].strip().splitlines()


def test_each_row_shows_the_figures_of_the_record_kept_beside_the_document() -> None:
    kept = latest_rows(RECORDS)
    text = DOCUMENT.read_text()
    table, expected = table_of(text, START, END), render(kept, recorded_faults()).splitlines()
    # The header: when the records were measured and under what load (not the machine's
    # name nor when the table was written, which depend on where it was rendered).
    assert table[0].split(" on ", 1)[0] == expected[0].split(" on ", 1)[0], (table[0], expected[0])
    assert "load average" not in expected[0] or (
        expected[0].split("load average", 1)[1].split(";")[0]
        == table[0].split("load average", 1)[1].split(";")[0]
    ), (table[0], expected[0])
    differing = [
        (shown, measured)
        for shown, measured in zip(table[1:], expected[1:], strict=False)
        if shown != measured
    ]
    assert not differing and len(table) == len(expected), (
        "docs/reliability.md's table differs from docs/reliability-records.jsonl; run "
        f"`make reliability-report`: {differing[:3]}"
    )
    for record in kept.values():  # each a measurement, with when and under what load
        for figure in ("detect_s", "recover_s"):
            assert record[figure] is None or isinstance(record[figure], int | float), record
        assert record["at"] and isinstance(record["load"], int | float), record

    soaks = latest_soaks(RECORDS)
    assert table_of(text, SOAK_START, SOAK_END) == render_soak(soaks).splitlines(), (
        "docs/reliability.md's soak table differs from docs/reliability-records.jsonl"
    )


def test_the_records_kept_are_those_of_the_tables(tmp_path: Path) -> None:
    source = rows(
        tmp_path / "r.jsonl",
        row("a", 1.0, "2026-01-01 10:00:00"),
        soak(12, 2, "2026-01-01 10:05:00"),
        row("a", 2.0, "2026-01-01 10:06:00"),
    )
    kept = tmp_path / "kept.jsonl"
    keep_records(latest_rows(source), latest_soaks(source), kept)
    assert latest_rows(kept) == {"a": row("a", 2.0, "2026-01-01 10:06:00")}
    assert [s["seed"] for s in latest_soaks(kept)] == [2]
    # A run of the fault tests alone keeps the soak's records, and the other way round.
    keep_records({"b": row("b", 3.0, "2026-01-02 10:00:00")}, [], kept)
    assert list(latest_rows(kept)) == ["b"] and [s["seed"] for s in latest_soaks(kept)] == [2]
    keep_records({}, [soak(200, 5, "2026-01-03 10:00:00")], kept)
    assert list(latest_rows(kept)) == ["b"] and [s["seed"] for s in latest_soaks(kept)] == [5]


def test_every_fault_test_is_named_with_what_it_asserts() -> None:
    text = DOCUMENT.read_text().split("## What each test asserts", 1)[1]
    tests = [
        node.name
        for path in sorted((ROOT / "tests" / "faults").glob("test_*.py"))
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    ]
    assert len(tests) >= 20, tests
    missing = [name for name in tests if f"`{name}`" not in text and f"::{name}`" not in text]
    assert not missing, f'docs/reliability.md, "What each test asserts", lacks: {missing}'
