"""GPUs honestly, with real agents, scheduler and replicas on this GPU-less machine.

A fake `nvidia-smi` on the agents' PATH reports two GPUs (this machine's NVML finds no
driver, so discovery falls back to it); the TensorFlow here is tensorflow-cpu without
CUDA libraries, as on a GPU host where the GPU build was not installed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from cohort.client import Client
from tests.e2e.conftest import pg_stack_with, wait_for, wait_terminal

FAKE_NVIDIA_SMI = """#!/bin/sh
# Answers the one query the agent makes (workers/node/gpus.py).
echo "0, GPU-11111111-aaaa-bbbb-cccc-000000000000, 40960, NVIDIA A100-SXM4-40GB"
echo "1, GPU-22222222-aaaa-bbbb-cccc-000000000000, 81559, NVIDIA H100 80GB HBM3"
"""


def fake_gpu_path(tmp_path: Path) -> str:
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(FAKE_NVIDIA_SMI)
    script.chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def node(client: Client, node_id: str) -> dict[str, Any] | None:
    return next((n for n in client.nodes() if n["id"] == node_id and n["status"] == "ready"), None)


def test_gpus_tensorflow_cannot_use_are_not_offered_nor_silently_ignored(tmp_path: Path) -> None:
    with pg_stack_with(tmp_path, {"PATH": fake_gpu_path(tmp_path)}) as (stack, client):
        # The stack's agent asks this machine's TensorFlow, which sees no GPU: it offers
        # none of the two NVML-like discovery found, and says why in its log.
        log = stack.log_dir / "agent.log"
        wait_for(lambda: "offering no GPUs" in log.read_text(), 120, "the agent's probe")
        assert "TensorFlow in" in log.read_text() and "sees none" in log.read_text()
        own = node(client, "e2e-node")
        assert own is not None and own["gpus"] == 0 and own["gpu_devices"] == []

        # An agent told to trust NVML offers both, with their model and memory.
        stack.add_agent("trusting", 1, node_gpu_probe="false")
        trusting = wait_for(
            lambda: (n := node(client, "trusting")) and n["gpus"] == 2 and n,
            60,
            "the trusting agent's GPUs",
        )
        assert trusting["gpu_devices"] == [
            {"index": 0, "name": "NVIDIA A100-SXM4-40GB", "memory_mb": 40960},
            {"index": 1, "name": "NVIDIA H100 80GB HBM3", "memory_mb": 81559},
        ]

        # A replica given a GPU its TensorFlow cannot see fails at once, saying why,
        # with the distinct exit code, rather than training on the CPU.
        job = client.submit(
            {
                "name": "needs-a-gpu",
                "trainer": "mlp_digits",
                "strategy": "one_device",
                "replicas": 1,
                "gpus_per_replica": 1,
                "max_restarts": 0,
                "hyperparameters": {"epochs": 1},
            }
        )
        done = wait_terminal(client, job["id"])
        assert done["status"] == "failed", done
        replica = done["replica_list"][0]
        assert replica["node_id"] == "trusting" and replica["exit_code"] == 78, replica
        replica_log = (
            stack.settings.data_dir
            / "jobs"
            / str(job["id"])
            / "logs"
            / "attempt-1"
            / "replica-0.log"
        ).read_text()
        assert "given GPU 0 but TensorFlow sees 0 of 1" in replica_log
        assert "num_replicas_in_sync" not in replica_log  # no strategy, nothing trained
        assert "TensorFlow sees 0 of 1" in done["reason"], done["reason"]


# Lists the GPUs only after a few seconds the first time, as NVML and a TensorFlow probe
# take seconds on a real host; at once after that.
SLOW_NVIDIA_SMI = """#!/bin/sh
marker="$(dirname "$0")/listed-once"
if [ ! -e "$marker" ]; then
    touch "$marker"
    sleep {delay}
fi
exec "$(dirname "$0")/nvidia-smi-now" "$@"
"""


def slow_gpu_path(tmp_path: Path, delay: float) -> str:
    bin_dir = tmp_path / "slow-bin"
    bin_dir.mkdir()
    for name, text in (
        ("nvidia-smi", SLOW_NVIDIA_SMI.format(delay=delay)),
        ("nvidia-smi-now", FAKE_NVIDIA_SMI),
    ):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"


def test_a_gpu_job_submitted_before_the_inventory_waits_for_it_never_unschedulable(
    tmp_path: Path,
) -> None:
    with pg_stack_with(tmp_path) as (stack, client):  # its own agent: CPU slots, no GPU
        stack.add_agent("late", 1, env={"PATH": slow_gpu_path(tmp_path, 8)}, node_gpu_probe="false")
        registered = wait_for(
            lambda: next((n for n in client.nodes() if n["id"] == "late"), None),
            60,
            "the late agent's first beat",
            interval=0.05,
        )
        job = client.submit(
            {
                "name": "gpu-at-once",
                "command": ["python", "-c", SEES_GPUS],
                "replicas": 1,
                "gpus_per_replica": 1,
                "max_restarts": 0,
            }
        )
        reasons: list[str] = []

        def placed() -> dict[str, Any] | None:
            seen = client.job(job["id"])
            reasons.append(seen["reason"] or "")
            return seen if seen["status"] != "queued" else None

        wait_for(placed, 60, "the job to be placed", interval=0.1)
        # While its GPUs were being listed the node was offered to no job, and the job
        # said why, never that no cluster could run it.
        unfit = [r for r in reasons if r.startswith("unschedulable")]
        assert not unfit, unfit
        assert registered["status"] == "pending" and registered["gpus"] == 0, registered
        assert any(r.startswith("inventory pending on node late") for r in reasons), reasons
        done = wait_terminal(client, job["id"])
        assert done["status"] == "succeeded", done
        assert [r["node_id"] for r in done["replica_list"]] == ["late"]
        lines = [line["line"] for line in client.logs(job["id"], limit=1000)]
        assert "CUDA_VISIBLE_DEVICES=0" in lines, lines
        own = node(client, "late")
        assert own is not None and own["gpus"] == 2


# A replica of a `command` job: what CUDA was told to show it.
SEES_GPUS = "import os; print('CUDA_VISIBLE_DEVICES=' + os.environ['CUDA_VISIBLE_DEVICES'])"
