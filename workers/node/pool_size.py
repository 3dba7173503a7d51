"""How many warm replica processes an agent keeps (workers/node/pool.py).

COHORT_REPLICA_POOL_SIZE = N keeps N, whatever runs; 0 keeps none. "auto" (the default):
the pool is sized by the node: one warm process per free slot (a slot a replica could
start on now: NODE_SLOTS less the replicas running), and no more than fit in
COHORT_REPLICA_POOL_MEMORY. A warm process's memory is what one more of them adds: the
pages it has written (private dirty: its heap, what it relocated and set up;
/proc/PID/smaps_rollup), measured on each one that gets ready, the largest seen kept;
ESTIMATE_BYTES until one has. The libraries it has read are the page cache's, shared
with every other process that maps them (the next warm process, the replicas): counted
as its "private clean" pages only while no other process maps them, they made a warm
process that got ready alone measure 610 MiB instead of 250, and a pool of the default
1 GiB keep one process instead of two. The keeper starts processes up to the
target and never stops a ready one to meet a lower one: while a node's slots are all
busy no replacement starts (none could be handed a replica), and once replicas end the
pool fills again, at the lowest CPU priority first (workers/process_priority.py).
"""

from __future__ import annotations

from collections.abc import Callable

# What one warm process holds of its own before any has been measured: TensorFlow and
# tf_keras imported, about 250 MiB on x86-64 CPU builds.
ESTIMATE_BYTES = 300 * 1024 * 1024


class PoolSize:
    """The pool's target size: `fixed`, or free slots within `memory` bytes."""

    def __init__(
        self, fixed: int | None, free_slots: Callable[[], int] = lambda: 0, memory: int = 0
    ) -> None:
        self.fixed = fixed
        self.free_slots = free_slots
        self.memory = memory
        self.process_bytes = 0  # the largest warm process measured so far

    @property
    def off(self) -> bool:
        """Never any warm process: size 0, or no room in memory for one."""
        return self.fixed == 0 or (self.fixed is None and self.memory < self._each())

    def target(self) -> int:
        """How many warm processes to have now."""
        if self.fixed is not None:
            return self.fixed
        return max(0, min(self.free_slots(), self.memory // self._each()))

    def measure(self, pid: int) -> None:
        """Count what warm process `pid` holds of its own (nothing if it cannot be read)."""
        self.process_bytes = max(self.process_bytes, private_bytes(pid))

    def describe(self) -> str:
        if self.fixed is not None:
            return f"{self.fixed}"
        return f"one per free slot, within {self.memory / 2**20:.0f} MiB"

    def _each(self) -> int:
        return self.process_bytes or ESTIMATE_BYTES


def private_bytes(pid: int) -> int:
    """Bytes of memory process `pid` has written and holds alone (its private dirty
    pages), what another process like it would add; 0 if its /proc entry cannot be
    read."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as handle:
            for line in handle:
                name, _, rest = line.partition(":")
                if name == "Private_Dirty":
                    total += int(rest.split()[0]) * 1024  # kB
    except (OSError, ValueError):
        return 0
    return total
