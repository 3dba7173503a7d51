"""`cohort sweep show ID --follow`: a live table of a sweep's trials (status, parameters,
objective) until the sweep ends, polled from `GET /api/v1/sweeps/{id}` once a second.

On a terminal the table redraws in place (Rich Live); piped, one line per trial whose
status or objective changed, then the final table, so a log or CI job reads the same
story without cursor codes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from cli.sweeps import trials_table
from services.statuses import SweepStatus

POLL_SECONDS = 1.0
# How long the API may stay unreachable (a restart) before following gives up.
UNREACHABLE_SECONDS = 60.0
Fetch = Callable[[], dict[str, Any]]


def sweep_view(sweep: dict[str, Any]) -> RenderableType:
    """The header (status, counts, best so far) over the trials table."""
    counts = ", ".join(f"{n} {s}" for s, n in sorted(sweep["trial_counts"].items()))
    head = Text.assemble(
        f"sweep {sweep['id']} ",
        (sweep["name"], "bold"),
        f": {sweep['status']} - ",
        sweep["reason"],
        "\n",
        f"{sweep['trials_created']}/{sweep['trials_total']} trials created, at most "
        f"{sweep['max_concurrent']} at once; {counts or 'none yet'}",
    )
    if sweep["best_job_id"] is not None:
        head.append(
            f"\nbest: job {sweep['best_job_id']} = {sweep['best_value']:.6g} "
            f"{sweep['best_parameters']}",
            style="green",
        )
    return Group(head, trials_table(sweep))


def _changes(before: dict[int, tuple[Any, ...]], sweep: dict[str, Any]) -> list[str]:
    """One line per trial that is new or whose status or objective value moved."""
    lines = []
    for trial in sweep.get("trials") or []:
        state = (trial["status"], trial["objective_value"])
        if before.get(trial["job_id"]) == state:
            continue
        before[trial["job_id"]] = state
        value = "-" if state[1] is None else f"{state[1]:.6g}"
        lines.append(
            f"trial {trial['index']} (job {trial['job_id']}): {state[0]}, "
            f"{sweep['objective']['metric']} {value}"
        )
    return lines


def _ended(sweep: dict[str, Any]) -> bool:
    return sweep["status"] != SweepStatus.RUNNING


def follow_sweep(fetch: Fetch, console: Console, poll: float = POLL_SECONDS) -> dict[str, Any]:
    """Show the sweep `fetch` returns, again every `poll` seconds, until it ends; returns
    the final sweep."""
    sweep = fetch()
    if not console.is_terminal:
        seen: dict[int, tuple[Any, ...]] = {}
        while True:
            for line in _changes(seen, sweep):
                console.print(line, highlight=False)
            if _ended(sweep):
                break
            time.sleep(poll)
            sweep = _fetch_patiently(fetch, poll)
        console.print(sweep_view(sweep))
        return sweep
    with Live(sweep_view(sweep), console=console, auto_refresh=False) as live:
        while not _ended(sweep):
            time.sleep(poll)
            sweep = _fetch_patiently(fetch, poll)
            live.update(sweep_view(sweep), refresh=True)
    return sweep


def _fetch_patiently(fetch: Fetch, poll: float) -> dict[str, Any]:
    """`fetch()`, retried every `poll` seconds while the API does not answer (for up to
    UNREACHABLE_SECONDS)."""
    deadline = time.monotonic() + UNREACHABLE_SECONDS
    while True:
        try:
            return fetch()
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(poll)
