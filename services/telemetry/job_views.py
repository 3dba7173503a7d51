"""The job view (`JobRead`) that REST answers and the live streams send: one builder, so a
job reads the same whichever way a client asks for it."""

from __future__ import annotations

from sqlalchemy.orm import Session

from services.jobs import queue, store
from services.jobs.schemas import JobRead, ReplicaRead
from services.models import Job
from services.telemetry import progress, scaling


def read_job_views(
    *, session: Session, jobs: list[Job], cluster_wide: bool = False
) -> list[JobRead]:
    """Jobs with the replicas of their current attempts and their places in their
    project's queue, in two queries whatever the page size (lists, the project's stream);
    `cluster_wide` (admins): their places in the whole queue too, in a third."""
    replicas = store.read_current_replicas(session=session, jobs=jobs)
    places = queue.queue_positions(session=session, jobs=jobs)
    overall = queue.cluster_queue_positions(session=session, jobs=jobs) if cluster_wide else {}
    views = []
    for job in jobs:
        view = JobRead.model_validate(job)
        view.replica_list = [ReplicaRead.model_validate(r) for r in replicas[job.id]]
        view.queue_position = places.get(job.id)
        view.cluster_queue_position = overall.get(job.id)
        views.append(view)
    return views


def read_job_view(
    *, session: Session, job: Job, with_progress: bool = True, cluster_wide: bool = False
) -> JobRead:
    """One job as `GET /jobs/{id}` and the job's stream send it: replicas, place in the
    queue, progress and, once finished, scaling (`with_progress=False`: as a list sends it,
    for submit and cancel)."""
    view = read_job_views(session=session, jobs=[job], cluster_wide=cluster_wide)[0]
    if with_progress:
        view.progress = progress.read_progress(session=session, job=job)
        view.scaling = scaling.read_scaling(session=session, job=job)
    return view
