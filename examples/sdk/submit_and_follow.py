"""Submit, follow and download from Python, as a notebook would, with Cohort's SDK.

Run against any Cohort (`make up` for a local one) from the repository:

    .venv/bin/python examples/sdk/submit_and_follow.py

It submits examples/custom_loop with its spec, prints each status change and a line per
ten steps of loss as they stream in, waits for the end, and downloads the model into
./model.tar.gz. Each cell below is a step you would run on its own in a notebook.
"""

from __future__ import annotations

from pathlib import Path

from cohort import Client, MetricEvent, StatusEvent

EXAMPLE = Path(__file__).resolve().parent.parent / "custom_loop"

# Cell 1: connect. COHORT_URL and COHORT_TOKEN, else what `cohort up` / `cohort login` saved.
client = Client()

# Cell 2: submit the spec with its code (packed, uploaded once, named by its digest).
job = client.submit(EXAMPLE / "job.yaml", code=EXAMPLE)
print(f"job {job.id}: {job.status}")

# Cell 3: follow it live: typed events, to its end (a dropped connection resumes).
for event in job.follow(kinds=("status", "metric")):
    if isinstance(event, StatusEvent):
        print(f"status: {event.job.status} {event.reason}")
    elif isinstance(event, MetricEvent) and event.point.name == "loss":
        if event.point.step % 10 == 0:
            print(f"replica {event.point.replica} step {event.point.step}: {event.point.value:.4f}")

# Cell 4: the outcome, the stored curve, the model.
job = job.wait()
print(f"job {job.id} {job.status} after {job.attempt} attempt(s)")
losses = [p.value for p in job.metrics(name="loss", replica=0)]
print(f"loss: {losses[0]:.3f} -> {losses[-1]:.3f} over {len(losses)} points")
if job.status == "succeeded":
    print("model:", job.download("model", "model.tar.gz"))
