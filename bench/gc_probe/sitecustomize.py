"""The probe of bench/gc_pauses.py, loaded by every Python process started with this
directory on PYTHONPATH: with COHORT_GC_PROBE=DIR set, each process writes DIR/<pid>.gc,
its command line first, then a line per cycle collection: its generation and the CPU ms
of the collecting thread (what bench/gc_pauses.py tabulates)."""

import os
import sys

_DIR = os.environ.get("COHORT_GC_PROBE")
if _DIR:
    import gc
    import time

    _out = open(os.path.join(_DIR, f"{os.getpid()}.gc"), "a", buffering=1)  # noqa: SIM115
    _out.write("# " + " ".join(sys.argv)[:300] + "\n")
    _started = [0.0]

    def _collection(phase: str, info: dict) -> None:
        if phase == "start":
            _started[0] = time.thread_time()
            return
        _out.write(f"{info['generation']} {(time.thread_time() - _started[0]) * 1000:.3f}\n")

    gc.callbacks.append(_collection)
