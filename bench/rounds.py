"""Side by side, the one way bench/'s comparisons run: each side once a round, the order
swapped every round, round 0 a warm-up that is not kept; the figure is the median of the
per-round ratios (never a ratio of medians)."""

from __future__ import annotations

import statistics
from collections.abc import Callable


def interleaved(sides: dict[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Each side's measurement in every kept round (rounds 1..rounds), printed as it comes."""
    names = list(sides)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(rounds + 1):
        order = names if round_ % 2 == 0 else names[::-1]
        took = {name: sides[name]() for name in order}
        label = "warm-up" if round_ == 0 else f"round {round_}"
        shown = ", ".join(f"{name} {took[name]:.2f} s" for name in order)
        print(f"{label} ({'-'.join(order)}): {shown}", flush=True)
        if round_:
            for name in names:
                times[name].append(took[name])
    return times


def per_round_ratios(times: dict[str, list[float]], top: str, bottom: str) -> list[float]:
    return [a / b for a, b in zip(times[top], times[bottom], strict=True)]


def ratio_row(label: str, ratios: list[float]) -> str:
    """A table row: the median of the per-round ratios, then each round's."""
    shown = ", ".join(f"{r:.2f}" for r in ratios)
    return f"| {label}, median of per-round ratios | {statistics.median(ratios):.2f} | {shown} |"


def median_row(label: str, runs: list[float], unit: str = "s", digits: int = 2) -> str:
    shown = ", ".join(f"{r:.{digits}f}" for r in runs)
    return f"| {label} | {statistics.median(runs):.{digits}f} {unit} | {shown} |"
