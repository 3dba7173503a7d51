"""The objects a long-running process made while starting, kept out of the cycle
collector's full collections.

A service imports its modules and builds its app once (the api: about 158,000 objects);
nearly all of them live as long as the process. Python's collector walks every tracked
object at each full collection: those alone took the api 90-100 ms, of its one event
loop's time (every open stream waited), and the scheduler's collections held the GIL
its ingest thread needed. They were most of emit -> SSE's tail (docs/benchmarks.md,
"Emit to SSE: the collector's pauses"). After
`freeze_startup_objects` those objects sit in the collector's permanent generation, and a
full collection walks only what the process made since. What was garbage at that point is
collected first; a cycle among the frozen objects that becomes garbage later is never
collected, which for a module, a class or a route is the process's lifetime anyway.
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_frozen = False


def freeze_startup_objects() -> bool:
    """Collect once, then freeze what is left; only the first call of a process does
    anything (an api's lifespan may run more than once in one process, as under a test
    client). Returns whether this call froze."""
    global _frozen
    with _lock:  # the check and the set as one step
        if _frozen:
            return False
        _frozen = True
        gc.collect()
        gc.freeze()
        return True
