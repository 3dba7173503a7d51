"""Per-replica resource figures: CPU %, memory, GPU use through NVML when there is one,
and the replica's busy seconds per step (busy_time.py: what straggler detection compares).

A daemon thread in the replica samples every few seconds and adds the figures to the
replica's `ReplicaReporter` at the current training step, so they travel in the same
batches as the training metrics. A sample costs well under a millisecond; NVML is
used only when `pynvml` (nvidia-ml-py) is importable and a GPU was given to the replica.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import psutil

from workers.replica.busy_time import BusyPerStep, busy_seconds
from workers.replica.callbacks import ReplicaReporter
from workers.replica.devices_check import given_gpus

SAMPLE_SECONDS = 2.0


def _nvml_handles() -> tuple[Any, list[Any]]:
    """NVML and the handles of this replica's GPUs, or (None, []) without GPUs."""
    visible = given_gpus(os.environ)
    if not visible:
        return None, []
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml, [pynvml.nvmlDeviceGetHandleByIndex(int(d)) for d in visible]
    except Exception:  # noqa: BLE001 - no driver, no library: report CPU figures only
        return None, []


class ResourceSampler(threading.Thread):
    """Adds cpu_percent, memory_mb (and gpu_utilization, gpu_memory_mb) every few seconds."""

    def __init__(self, reporter: ReplicaReporter, interval: float = SAMPLE_SECONDS) -> None:
        super().__init__(daemon=True, name="cohort-resources")
        self.reporter = reporter
        self.interval = interval
        self._stop = threading.Event()
        self._process = psutil.Process()
        self._process.cpu_percent(None)  # primes the counter; the first real value follows
        self._busy = BusyPerStep()

    def sample(self) -> dict[str, float]:
        """One set of figures for this replica's process."""
        figures = {
            "cpu_percent": self._process.cpu_percent(None),
            "memory_mb": self._process.memory_info().rss / 2**20,
        }
        nvml, handles = self._nvml
        for i, handle in enumerate(handles):
            suffix = "" if len(handles) == 1 else f"_{i}"
            try:
                figures[f"gpu_utilization{suffix}"] = float(
                    nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                )
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                figures[f"gpu_memory_mb{suffix}"] = memory.used / 2**20
            except Exception:  # noqa: BLE001 - a GPU error must not stop training
                continue
        return figures

    def run(self) -> None:
        self._nvml = _nvml_handles()
        last = -1
        while not self._stop.wait(self.interval):
            step = self.reporter.last_step
            if step == last:
                # One sample per step: the key (job, attempt, replica, step, name) is stored
                # once, so a second sample at the same step would only be dropped.
                continue
            last = step
            figures = self.sample()
            busy = self._busy.sample(step, busy_seconds())
            if busy is not None:
                figures["busy_step_time"] = busy
            for name, value in figures.items():
                self.reporter.add(step, None, name, value)

    def stop(self) -> None:
        self._stop.set()

    _nvml: tuple[Any, list[Any]] = (None, [])
