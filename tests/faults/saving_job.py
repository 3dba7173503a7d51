"""A user's command job that checkpoints when asked (SIGUSR1), as docs/your-code.md tells
a command job to: it saves its step into $COHORT_CHECKPOINT_DIR and exits 75, and resumes
from that step when it starts again. The drain tests run it (a TensorFlow replica is not
what they test); the trainers' own answer to SIGUSR1 is workers/replica/'s.

argv: steps, seconds between steps, and `ignore` for a program that ignores SIGUSR1 (a
drain's grace then runs out). A `loss` point at every step; the saved step also when it
reaches its end, as a periodic checkpoint would, so that a step is never done twice by
an attempt that resumes from the store.
"""

from __future__ import annotations

from typing import Any

SCRIPT = """\
import os, signal, sys, time
from cohort.metrics import report
steps, pause, mode, every = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
state = os.path.join(os.environ["COHORT_CHECKPOINT_DIR"], "step")
asked = []
signal.signal(signal.SIGUSR1, signal.SIG_IGN if mode == "ignore" else lambda *_: asked.append(1))

def save(step):
    os.makedirs(os.path.dirname(state), exist_ok=True)
    with open(state + ".partial", "w") as f:
        f.write(str(step))
    os.replace(state + ".partial", state)

try:
    with open(state) as f:
        step = int(f.read())
    print(f"resuming after step {step}", flush=True)
except FileNotFoundError:
    step = 0
while step < steps:
    time.sleep(pause)
    step += 1
    report(step, loss=1.0 / step)
    if asked:
        save(step)
        print(f"checkpointed at step {step}: exiting 75", flush=True)
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # answered: a later one must not end it
        sys.exit(75)
    if every and step % every == 0:  # a periodic checkpoint, as a crash would find it
        save(step)
signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # done: nothing left to save
save(step)
print(f"done: {steps} steps", flush=True)
"""


def saving_job(
    steps: int, step_seconds: float, ignore: bool = False, every: int = 0, **fields: Any
) -> dict[str, Any]:
    """A job spec whose replicas each run `steps` steps `step_seconds` apart, save their
    step and exit 75 on SIGUSR1 (unless `ignore`), save it every `every` steps too (0:
    never), and resume from the saved step (bench/drains.py runs it as well)."""
    mode = "ignore" if ignore else "save"
    argv = [str(steps), str(step_seconds), mode, str(every)]
    return {"command": ["python", "-c", SCRIPT, *argv], **fields}
