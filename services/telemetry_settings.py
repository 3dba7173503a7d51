"""The settings of what replicas report, a part of `Settings` (services/settings.py);
docs/telemetry.md explains them."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class TelemetrySettings(BaseSettings):
    """Per-step points (workers/step_records.py)."""

    # Steps a second of one replica above which Cohort's runner ships one step's points in
    # several (each the mean `step_time` of the steps it stands for; an attempt's first 50
    # steps, each epoch's last step and the step before a flush always), set on the node
    # (the agent hands it to its replicas). 0: every step. A script's own
    # `cohort.report()` calls are never sampled.
    STEP_POINTS_PER_SECOND: float = Field(10.0, ge=0)
