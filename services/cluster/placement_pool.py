"""Free capacity of one kind (CPU slots or GPUs), bucketed by how much each node has free.

The placer's inner loop lives here. Buckets make every question it asks cheap:
"the smallest node with at least k free" and "nodes from the fullest down" walk
at most one bucket per distinct free count (a node has at most a few dozen slots
or GPUs), never every node, and taking capacity moves one node between two
buckets. Nothing is copied per job.
"""

from __future__ import annotations

from collections.abc import Iterator


class Pool:
    """Free units per node, for the nodes the placer may still hand out."""

    def __init__(self, free: dict[str, int]) -> None:
        """`free`: node id -> free units, in a stable node order (ties go to the first)."""
        top = max(free.values(), default=0)
        # Dicts as ordered sets: iteration order is insertion order, so a pass is
        # deterministic for a given input.
        self.buckets: list[dict[str, None]] = [{} for _ in range(max(top, 0) + 1)]
        self.free: dict[str, int] = {}
        self.units = 0
        self.top = 0
        for node_id, units in free.items():
            if units > 0:
                self.free[node_id] = units
                self.buckets[units][node_id] = None
                self.units += units
                self.top = max(self.top, units)

    def _lower_top(self) -> None:
        while self.top > 0 and not self.buckets[self.top]:
            self.top -= 1

    def room(self, per: int) -> int:
        """How many replicas of `per` units each fit in this pool in all."""
        if per == 1:
            return self.units
        return sum(len(self.buckets[f]) * (f // per) for f in range(per, self.top + 1))

    def best_fit(self, need: int) -> str | None:
        """The node with the least free capacity that still has `need` units, if any."""
        for units in range(need, self.top + 1):
            bucket = self.buckets[units]
            if bucket:
                return next(iter(bucket))
        return None

    def descending(self, per: int) -> Iterator[tuple[str, int]]:
        """(node, free units) with at least `per` free, the fullest first.

        The caller must not take capacity while iterating.
        """
        for units in range(self.top, per - 1, -1):
            for node_id in self.buckets[units]:
                yield node_id, units

    def take(self, node_id: str, units: int) -> None:
        """Hand out `units` of a node's free capacity."""
        have = self.free[node_id]
        if units > have:
            raise ValueError(f"node {node_id} has {have} free, asked {units}")
        del self.buckets[have][node_id]
        left = have - units
        self.units -= units
        if left:
            self.free[node_id] = left
            self.buckets[left][node_id] = None
        else:
            del self.free[node_id]
        self._lower_top()

    def give(self, node_id: str, units: int) -> None:
        """Hand back `units` taken from (or withdrawn with) a node earlier in this pass."""
        have = self.free.get(node_id, 0)
        if have:
            del self.buckets[have][node_id]
        now = have + units
        while len(self.buckets) <= now:
            self.buckets.append({})
        self.free[node_id] = now
        self.buckets[now][node_id] = None
        self.units += units
        self.top = max(self.top, now)

    def remove(self, node_id: str) -> int:
        """Withdraw a node's capacity from the pool (held for a blocked job); how much."""
        have = self.free.pop(node_id, 0)
        if have:
            del self.buckets[have][node_id]
            self.units -= have
            self._lower_top()
        return have


def choose(pool: Pool, count: int, per: int, spread: bool) -> list[tuple[str, int]] | None:
    """(node, replicas there) for `count` replicas of `per` units each, or None.

    Reads the pool only. Pack (spread=False): the smallest node that holds them all,
    else the nodes with the most free first. Spread: one replica per node on as many
    nodes as possible, the emptiest first.
    """
    left = count
    if pool.units < left * per or pool.room(per) < left:
        return None
    chosen: list[tuple[str, int]] = []
    if spread:
        names: list[str] = []
        rooms: list[int] = []
        for node_id, units in pool.descending(per):
            names.append(node_id)
            rooms.append(units // per)
            if len(names) == left:
                break
        taken = [0] * len(names)
        while left:  # round robin over the emptiest nodes until every replica has one
            for i, room in enumerate(rooms):
                if left and taken[i] < room:
                    taken[i] += 1
                    left -= 1
        return [(name, count) for name, count in zip(names, taken, strict=True) if count]
    best = pool.best_fit(per * left)
    if best is not None:
        return [(best, left)]
    for node_id, units in pool.descending(per):
        take = min(units // per, left)
        chosen.append((node_id, take))
        left -= take
        if not left:
            break
    return chosen
