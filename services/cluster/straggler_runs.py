"""Which replica of a gang is a straggler, from each replica's busy seconds per step:
pure, no I/O (services/cluster/stragglers.py reads the figures and records what it finds).

Each replica reports `busy_step_time` every few seconds (workers/replica/busy_time.py): its
threads' running and runnable seconds since its previous report, per step trained
meanwhile. A report at step b thus covers the steps after the replica's previous report,
(a, b]; a replica's first report covers steps that are not known and is only a start.

A replica straggles over a report when its figure is above `factor` times the median of
its peers' (the other replicas', over the steps they share with it: with two replicas,
the other's). It is a straggler when its newest reports straggle, without a break, over
at least `steps` steps. The median is its peers', not the gang's with it: in a gang of
two, a replica can never exceed twice a median it is half of.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Report:
    """One `busy_step_time` point: busy seconds per step over the steps up to `step`."""

    step: int
    value: float


@dataclass(frozen=True)
class Finding:
    """A straggler: its run of slow steps, and the figures over it (weighted by steps)."""

    replica: int
    first_step: int
    last_step: int
    busy_step_time: float
    peers_step_time: float


Span = tuple[int, int, float]  # (a, b, value): the report at b covers steps a+1..b


def spans(reports: Sequence[Report]) -> list[Span]:
    """The known spans of a replica's reports, oldest first (the oldest report only
    starts the first span)."""
    ordered = sorted(reports, key=lambda r: r.step)
    return [(p.step, r.step, r.value) for p, r in zip(ordered, ordered[1:], strict=False)]


def _overlapping(peer: list[Span], a: int, b: int) -> float | None:
    """The peer's figure over the span of its that shares most steps with (a, b]."""
    best, shared = None, 0
    for c, d, value in peer:
        overlap = min(b, d) - max(a, c)
        if overlap > shared:
            best, shared = value, overlap
    return best


def find_straggler(
    replica: int, by_replica: Mapping[int, list[Span]], *, factor: float, steps: int
) -> Finding | None:
    """Whether `replica` straggles over its newest `steps` steps or more (see the module)."""
    own = by_replica.get(replica, [])
    peers = [s for r, s in by_replica.items() if r != replica and s]
    if not own or not peers:
        return None
    slow_steps, busy, peer_sum = 0, 0.0, 0.0
    first = last = None
    for a, b, value in reversed(own):
        figures = [f for f in (_overlapping(p, a, b) for p in peers) if f is not None]
        if not figures:
            if last is None:
                continue  # newer than any peer's report: not comparable yet
            break
        median = statistics.median(figures)
        if not (median > 0 and value > factor * median):
            break
        last = b if last is None else last
        first = a + 1
        slow_steps += b - a
        busy += value * (b - a)
        peer_sum += median * (b - a)
    if slow_steps < steps or first is None or last is None:
        return None
    return Finding(replica, first, last, busy / slow_steps, peer_sum / slow_steps)


def find_stragglers(
    reports: Mapping[int, Sequence[Report]], *, factor: float, steps: int
) -> list[Finding]:
    """The stragglers of one gang, from each replica's newest reports."""
    by_replica = {replica: spans(rs) for replica, rs in reports.items()}
    found = (find_straggler(r, by_replica, factor=factor, steps=steps) for r in sorted(by_replica))
    return [f for f in found if f is not None]
