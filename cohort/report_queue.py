"""`report()`'s lines on their way to the metrics file, off the training thread.

The caller of `report()` (cohort/metrics.py) only checks its arguments and appends a
record to a deque: a few microseconds. A daemon thread turns the records into JSON lines
and writes them, every FLUSH_SECONDS, in one `write` per batch; values that are
tensors are read there too, so a training step never waits for its metrics to be
copied off the device. Before, each call encoded its line (~15 µs) and wrote it (~4 µs)
on the caller's thread, and a tensor's `float()` made the step wait for the device.

What is held is written when the process ends normally (atexit; and in a forked
multiprocessing child, whose end skips atexit, by multiprocessing's own finalizers),
and by `flush()`. A process killed with SIGKILL loses the points of its last
FLUSH_SECONDS: points of steps that its restart, resuming from a checkpoint, does
again. The thread writes only what was reported, never beats of its own, so a
training loop that hangs goes quiet as before and the hang watchdog sees it.

Standard library only: this module runs inside the user's training process.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import sys
import threading
import warnings
from collections import deque
from typing import Any

FLUSH_SECONDS = 0.2  # the longest a reported point waits before its line is written
MAX_PENDING = 10_000  # beyond this many records, report() writes them itself

# (path, step, metrics, ts); a metric's value is a float, or an object whose float()
# is read at write time (a tensor).
Record = tuple[str, int, dict[str, Any], float]

_pending: deque[Record] = deque()
_lock = threading.Lock()  # one writer at a time, and the file descriptor below
_fd: int | None = None
_fd_path: str | None = None
_thread: threading.Thread | None = None
_wake = threading.Event()
_said: set[str] = set()  # metrics already warned about (a bad tensor value)


def put(record: Record) -> None:
    """Queue one checked record; the writer thread starts with the first."""
    if _thread is None:
        _start()
    _pending.append(record)
    if len(_pending) >= MAX_PENDING:  # the writer falls behind: the caller helps
        flush()


def flush() -> None:
    """Write every record queued so far, in the order reported."""
    with _lock:
        batch: list[Record] = []
        while _pending:
            batch.append(_pending.popleft())
        # Consecutive records of one file go in one write (the path only changes
        # when $COHORT_METRICS_FILE does, i.e. in tests).
        start = 0
        for end in range(1, len(batch) + 1):
            if end == len(batch) or batch[end][0] != batch[start][0]:
                lines = [_line(record) for record in batch[start:end]]
                data = "".join(line for line in lines if line).encode()
                if data:
                    _write(batch[start][0], data)
                start = end


def _line(record: Record) -> str:
    _path, step, metrics, ts = record
    values: dict[str, float] = {}
    for name, value in metrics.items():
        number = value if isinstance(value, float) else _read(name, step, value)
        if number is not None:
            values[name] = number
    if not values:
        return ""
    return json.dumps({"step": step, "metrics": values, "ts": ts}, separators=(",", ":")) + "\n"


def _read(name: str, step: int, value: Any) -> float | None:
    """A tensor's value, read now; None (said once per metric on stderr) if it is not
    one finite number: the caller has moved on and cannot be told by an exception."""
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        problem = f"is not a single number ({exc})"
    else:
        if math.isfinite(number):
            return number
        problem = f"is {number}"
    if name not in _said:
        _said.add(name)
        warnings.warn(
            f"cohort.report(): metric {name!r} at step {step} {problem}; such points are "
            "not recorded",
            RuntimeWarning,
            stacklevel=1,
        )
    return None


def _write(path: str, data: bytes) -> None:
    global _fd, _fd_path
    if _fd is None or _fd_path != path:
        if _fd is not None:
            os.close(_fd)
        # O_APPEND: every write lands at the current end, so lines from several
        # threads or processes of the replica never overwrite each other.
        _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        _fd_path = path
    view = memoryview(data)
    # Whole lines in one write (the reader keeps a partial last line for its next
    # read); the loop only matters if the kernel ever writes less than asked.
    while view:
        view = view[os.write(_fd, view) :]


def _start() -> None:
    global _thread
    with _lock:
        if _thread is not None:
            return
        _thread = threading.Thread(target=_run, daemon=True, name="cohort-report-writer")
        _thread.start()
        atexit.register(flush)
        if "multiprocessing" in sys.modules:
            # A forked multiprocessing child ends with os._exit, after these.
            from multiprocessing import util

            util.Finalize(None, flush, exitpriority=0)


def _run() -> None:
    while True:
        _wake.wait(FLUSH_SECONDS)
        _wake.clear()
        try:
            flush()
        except Exception as exc:  # noqa: BLE001 - the writer outlives a failed write
            warnings.warn(
                f"cohort.report(): writing metrics failed: {exc}", RuntimeWarning, stacklevel=1
            )


def _forget_after_fork() -> None:
    """In a forked child: the parent's records are the parent's to write, its thread
    did not come along, and its lock may have been held at the fork."""
    global _lock, _thread, _pending, _wake
    _lock = threading.Lock()
    _pending = deque()
    _wake = threading.Event()
    _thread = None


os.register_at_fork(after_in_child=_forget_after_fork)
