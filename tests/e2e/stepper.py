"""A replica that is no model: a user's command job that reports a step at a steady pace.

The tests whose claim is about the control plane (messages lost or repeated, a scheduler
or api killed, clocks off, a link cut, a database restarted, gangs contending for
slots) need a process per replica that starts, reports steps and logs, and exits 0 at
its end; what runs inside it is not what they test. A TensorFlow replica costs about
7 CPU-seconds on this kind of machine (docs/benchmarks.md, "The test suite's time"),
most of it importing TensorFlow and tracing the model; this one costs a Python start.
It runs the way a user's own code does (`command`, tests/e2e/test_user_code.py), with
`cohort.report()` for its points, so the agent follows, ships and watches it as any
replica. The tests of what TensorFlow does (a peer's death seen by its gang, the
checkpoints a job resumes from, the strategies) keep the built-in trainer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cohort.bundles import pack
from cohort.client import Client

# argv: steps, seconds between steps. A `loss` point at every step (the watchdog counts
# each as progress) and a log line every 25 steps, flushed as it goes. With a
# `learning_rate` among its hyperparameters, an `accuracy` too, which climbs at that rate
# (min(1, rate × step)): a sweep's trials that learn well or not at all.
SCRIPT = """\
import json, os, sys, time
from cohort.metrics import report
steps, pause = int(sys.argv[1]), float(sys.argv[2])
with open(os.environ["COHORT_HYPERPARAMETERS"]) as f:
    rate = json.load(f).get("learning_rate")
for step in range(1, steps + 1):
    time.sleep(pause)
    learned = {} if rate is None else {"accuracy": min(1.0, float(rate) * step)}
    report(step, loss=1.0 / step, **learned)
    if step % 25 == 0 or step == steps:
        print(f"step {step} of {steps}", flush=True)
"""


def stepping_job(
    steps: int, step_seconds: float = 0.01, *, bundle: str | None = None, **fields: Any
) -> dict[str, Any]:
    """A job spec whose replicas each report `steps` steps `step_seconds` apart (so it
    runs about steps × step_seconds), then exit 0; `fields` are the rest of the spec.
    With `bundle` (stepper_bundle's), the script is run as that bundle's `stepper.py`,
    which a warm process takes (a `python -c` always starts cold)."""
    program = ["stepper.py"] if bundle else ["-c", SCRIPT]
    spec = {"command": ["python", *program, str(steps), str(step_seconds)], **fields}
    return {**spec, "bundle": bundle} if bundle else spec


def stepper_bundle(client: Client, workdir: Path) -> str:
    """Upload a bundle holding the stepper as `stepper.py`; its digest."""
    code = workdir / "stepper-code"
    code.mkdir(exist_ok=True)
    (code / "stepper.py").write_text(SCRIPT)
    info = pack(code, workdir / "stepper.tar.gz")
    if not client.has_bundle(info.digest):
        client.upload_bundle(info.digest, workdir / "stepper.tar.gz")
    return info.digest
