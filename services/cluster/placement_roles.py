"""Placing a gang whose processes are not interchangeable: a parameter_server gang.

Such a gang is still placed whole or not at all (placement.py), but as parts:

* the chief's part lists the chief first and the evaluator second: those two share
  one node (`together`), because the evaluator reads the checkpoints the chief
  writes to the job's checkpoint directory on its node;
* `role_placement: {chief: separate}` puts the chief (and its evaluator) on nodes
  that run none of the job's workers or ps; `{ps: separate}` keeps the ps off the
  nodes of the chief and the workers. `any` (the default) lets roles share nodes.

A part that is `separate` avoids every node of the other parts (and they avoid its
nodes). Pure, like placement.py: the pool is borrowed and given back unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from services.cluster.placement_pool import Pool, choose
from services.cluster.tf_config import gang_roles


@dataclass(frozen=True)
class GangPart:
    """Replicas (by index) placed together under one rule."""

    indexes: tuple[int, ...]
    together: int = 1  # the first `together` of `indexes` share one node
    separate: bool = False  # no node shared with another part

    @property
    def count(self) -> int:
        return len(self.indexes)


def ps_parts(
    roles: Mapping[str, int], role_placement: Mapping[str, str] | None = None
) -> tuple[GangPart, ...]:
    """The parts of a parameter_server gang (replica indexes as tf_config.gang_roles)."""
    slots = gang_roles("parameter_server", sum(roles.values()), roles)
    of = {
        role: tuple(i for i, (r, _) in enumerate(slots) if r == role)
        for role in ("chief", "worker", "ps", "evaluator")
    }
    chief_apart = (role_placement or {}).get("chief") == "separate"
    ps_apart = (role_placement or {}).get("ps") == "separate"
    home = of["chief"] + of["evaluator"]
    rest = of["worker"] + (() if ps_apart else of["ps"])
    if chief_apart:
        parts = [GangPart(home, together=len(home), separate=True), GangPart(rest)]
    else:
        parts = [GangPart(home + rest, together=len(home))]
    if ps_apart:
        parts.append(GangPart(of["ps"], separate=True))
    return tuple(part for part in parts if part.indexes)


def _choose_part(
    pool: Pool, part: GangPart, per: int, spread: bool
) -> list[tuple[str, int]] | None:
    if part.together <= 1:
        return choose(pool, part.count, per, spread) if part.count else []
    # A part that must sit whole on one node has nothing to spread: its best fit, under
    # either policy (spread's largest node could leave the other parts no room).
    if not spread or part.together == part.count:
        best = pool.best_fit(per * part.count)
        if best is not None:
            return [(best, part.count)]
    home = next((node for node, _ in pool.descending(per * part.together)), None)
    if home is None:
        return None
    pool.take(home, per * part.together)
    try:
        left = part.count - part.together
        rest = choose(pool, left, per, spread) if left else []
    finally:
        pool.give(home, per * part.together)
    if rest is None:
        return None
    counts = {home: part.together}  # home first: the part's first replicas go there
    for node, count in rest:
        counts[node] = counts.get(node, 0) + count
    return list(counts.items())


def choose_parts(
    pool: Pool, parts: Sequence[GangPart], per: int, spread: bool
) -> list[list[tuple[str, int]]] | None:
    """(node, replicas there) for each part, or None if the gang does not fit.

    Reads the pool only: what it takes to try is given back before it returns.
    """
    taken: list[tuple[str, int]] = []
    withdrawn: list[tuple[str, int]] = []
    used: list[set[str]] = []
    chosen: list[list[tuple[str, int]]] = []
    try:
        for j, part in enumerate(parts):
            avoid = set().union(
                *(
                    used[i]
                    for i, earlier in enumerate(parts[:j])
                    if earlier.separate or part.separate
                )
            )
            withdrawn.extend((node, pool.remove(node)) for node in sorted(avoid))
            nodes = _choose_part(pool, part, per, spread)
            for node, units in withdrawn:
                if units:
                    pool.give(node, units)
            withdrawn.clear()
            if nodes is None:
                return None
            for node, count in nodes:
                pool.take(node, count * per)
                taken.append((node, count * per))
            chosen.append(nodes)
            used.append({node for node, _ in nodes})
        return chosen
    finally:
        for node, units in withdrawn + taken:
            if units:
                pool.give(node, units)
