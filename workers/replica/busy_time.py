"""How long a replica's threads ran or waited for a CPU: its own work, without the time
it spent waiting for its gang.

Under MultiWorkerMirroredStrategy every worker's wall step time is the same: each waits
at the gradients' all-reduce for the slowest. What differs is how the step's time is
spent: a worker slowed by its node (a CPU shared with another process, a CPU quota, a
slower or throttled CPU) is busy, running or runnable, for the whole step; its peers
finish their part sooner and sleep in the collective until it arrives. The kernel counts
both parts per thread in /proc/self/task/<tid>/schedstat (nanoseconds on a CPU, then
nanoseconds runnable but waiting for one), so their sum over the process's threads is
the replica's own time, whatever its gang made it wait.

The resource sampler (resources.py) reads it every few seconds, never the training
thread, and reports `busy_step_time`: that sum's growth since its last sample, per step
trained meanwhile. A GPU's kernels are not in it (a thread waiting for its GPU sleeps),
so on GPUs it shows the host's share of a step only.
"""

from __future__ import annotations

import os
from pathlib import Path

TASKS = Path("/proc/self/task")


def busy_seconds(tasks: Path = TASKS) -> float | None:
    """Seconds this process's live threads have run or waited for a CPU; None where the
    kernel does not count it (no schedstat: another OS, or a kernel built without it)."""
    total = 0
    found = False
    try:
        names = os.listdir(tasks)
    except OSError:
        return None
    for name in names:
        try:
            with open(tasks / name / "schedstat", "rb") as handle:
                fields = handle.read().split()
        except OSError:  # the thread ended meanwhile
            continue
        if len(fields) >= 2:
            total += int(fields[0]) + int(fields[1])
            found = True
    return total / 1e9 if found else None


class BusyPerStep:
    """The replica's busy seconds per step between two samples."""

    def __init__(self) -> None:
        self._last: tuple[int, float] | None = None

    def sample(self, step: int, busy: float | None) -> float | None:
        """Busy seconds per step since the last sample (None on the first, or when no
        step was trained or the count went back: a busy thread that ended took its
        seconds with it). Step 0 is before training: the first interval would count
        the replica's start (TensorFlow's import, tracing the step function)."""
        if busy is None or step <= 0:
            return None
        last, self._last = self._last, (step, busy)
        if last is None or step <= last[0] or busy < last[1]:
            return None
        return (busy - last[1]) / (step - last[0])
