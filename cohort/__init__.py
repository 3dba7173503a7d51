"""The optional client a training script imports inside a Cohort replica.

    from cohort import report
    report(step, loss=loss, accuracy=accuracy)

Only the standard library: this runs inside the user's process, next to their
TensorFlow, and must add nothing to it. Outside Cohort every call is a no-op.

    metrics.py  report(): one JSON line per call in $COHORT_METRICS_FILE
"""

from cohort.metrics import report

__all__ = ["report"]
