"""The probe of bench/gc_pauses.py, loaded by every Python process started with this
directory on PYTHONPATH: with COHORT_GC_PROBE=DIR set, each process writes DIR/<pid>.gc,
its command line first, then a line per cycle collection: generation, wall ms, objects
collected, unix time at its end, CPU ms of the collecting thread."""

import os
import sys

_DIR = os.environ.get("COHORT_GC_PROBE")
if _DIR:
    import gc
    import time

    _out = open(os.path.join(_DIR, f"{os.getpid()}.gc"), "a", buffering=1)  # noqa: SIM115
    _out.write("# " + " ".join(sys.argv)[:300] + "\n")
    _started = [0.0, 0.0]

    def _collection(phase: str, info: dict) -> None:
        if phase == "start":
            _started[:] = [time.perf_counter(), time.thread_time()]
            return
        wall = (time.perf_counter() - _started[0]) * 1000
        cpu = (time.thread_time() - _started[1]) * 1000
        _out.write(
            f"{info['generation']} {wall:.3f} {info['collected']} {time.time():.3f} {cpu:.3f}\n"
        )

    gc.callbacks.append(_collection)
