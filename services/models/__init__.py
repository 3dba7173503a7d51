"""SQLAlchemy 2 ORM models, one table a class, grouped by what they record.

    base.py       the declarative base, UTC timestamps, enums stored as strings
    jobs.py       projects, jobs, code bundles, replicas, job events, nodes
    access.py     API tokens (scopes, expiry, revocation) and dashboard sessions
    series.py     metric points, their rollups, log lines
    schedules.py  retraining schedules and their runs
    data_files.py the contents of projects' data files (digests, for triggers and lineage)
    sweeps.py     sweeps and their trials' search state (the trials run as jobs)
    quotas.py     projects' quotas over the cluster's defaults
    leadership.py the scheduler's fencing token
    tracking.py   the MLflow export: projects' tracking URIs, where each starts, each job's run

Every model is imported here, so `Base.metadata` holds every table (Alembic, tests).
"""

from services.models.access import ApiToken, DashboardSession
from services.models.base import Base, UTCDateTime, utcnow
from services.models.data_files import DataFileRecord
from services.models.jobs import Bundle, Job, JobEvent, Node, Project, Replica
from services.models.leadership import SchedulerFence
from services.models.quotas import ProjectQuota
from services.models.schedules import Schedule, ScheduleRun
from services.models.series import LogLine, MetricPoint, MetricRollup
from services.models.sweeps import Sweep, SweepTrial
from services.models.tracking import MlflowRun, ProjectTracking, TrackingStart

__all__ = [
    "ApiToken",
    "Base",
    "Bundle",
    "DashboardSession",
    "DataFileRecord",
    "Job",
    "JobEvent",
    "LogLine",
    "MetricPoint",
    "MetricRollup",
    "MlflowRun",
    "Node",
    "Project",
    "ProjectQuota",
    "ProjectTracking",
    "Replica",
    "Schedule",
    "ScheduleRun",
    "SchedulerFence",
    "Sweep",
    "SweepTrial",
    "TrackingStart",
    "UTCDateTime",
    "utcnow",
]
