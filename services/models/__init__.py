"""SQLAlchemy 2 ORM models, one table a class, grouped by what they record.

    base.py       the declarative base, UTC timestamps, enums stored as strings
    jobs.py       projects, jobs, code bundles, replicas, job events, nodes, stragglers
    access.py     API tokens (scopes, expiry, revocation) and dashboard sessions
    series.py     metric points, their rollups, log lines
    schedules.py  retraining schedules, their runs and their models' evaluations
    registry.py   the model registry: models, versions, aliases and their moves
    data_files.py the contents of projects' data files (digests, for triggers and lineage)
    sweeps.py     sweeps and their trials' search state (the trials run as jobs)
    quotas.py     projects' quotas over the cluster's defaults
    leadership.py the scheduler's fencing token
    tracking.py   the MLflow export: projects' tracking URIs, where each starts, each job's run
    webhooks.py   webhooks, their deliveries (the outbox) and each delivery's attempts

Every model is imported here, so `Base.metadata` holds every table (Alembic, tests).
"""

from services.models.access import ApiToken, DashboardSession
from services.models.base import Base, UTCDateTime, utcnow
from services.models.data_files import DataFileRecord
from services.models.jobs import Bundle, Job, JobEvent, Node, Project, Replica, Straggler
from services.models.leadership import SchedulerFence
from services.models.quotas import ProjectQuota
from services.models.registry import AliasMove, ModelAlias, ModelVersion, RegisteredModel
from services.models.schedules import Evaluation, Schedule, ScheduleRun
from services.models.series import LogLine, MetricPoint, MetricRollup
from services.models.sweeps import Sweep, SweepTrial
from services.models.tracking import MlflowRun, ProjectTracking, TrackingStart
from services.models.webhooks import Webhook, WebhookAttempt, WebhookDelivery

__all__ = [
    "AliasMove",
    "ApiToken",
    "Base",
    "Bundle",
    "DashboardSession",
    "DataFileRecord",
    "Evaluation",
    "Job",
    "JobEvent",
    "LogLine",
    "MetricPoint",
    "MetricRollup",
    "MlflowRun",
    "ModelAlias",
    "ModelVersion",
    "Node",
    "Project",
    "ProjectQuota",
    "ProjectTracking",
    "RegisteredModel",
    "Replica",
    "Schedule",
    "ScheduleRun",
    "SchedulerFence",
    "Straggler",
    "Sweep",
    "SweepTrial",
    "TrackingStart",
    "UTCDateTime",
    "utcnow",
    "Webhook",
    "WebhookAttempt",
    "WebhookDelivery",
]
