"""Jobs with an `image` through a scheduling pass on PostgreSQL: placed only on a node
whose agent advertised a container engine, waiting with the reason while none has one,
and their start messages carry the image."""

from __future__ import annotations

import dataclasses

from sqlalchemy.orm import Session

from services.cluster.placement import NO_ENGINE
from services.jobs import store as jobs
from services.models import Node, utcnow
from services.statuses import JobStatus
from services.wire.replica import StartReplica
from tests.factories import create_job, create_token
from tests.services.test_gang_placement import beat, run


def test_a_job_with_an_image_waits_until_a_node_runs_containers_then_goes_there(
    session: Session,
) -> None:
    _, token = create_token(session)
    boxed = create_job(
        session,
        token.project_id,
        replicas=2,
        image="localhost/team-tf:1",
        command=["python", "t.py"],
    )
    plain = create_job(session, token.project_id, replicas=2)
    run(session, beat("n1", 4))
    assert boxed.status is JobStatus.QUEUED and boxed.reason == NO_ENGINE
    assert plain.status is JobStatus.SCHEDULED  # a job without an image is not held up

    engine = dataclasses.replace(beat("n2", 2), container_engine="docker", at=utcnow())
    result = run(session, dataclasses.replace(beat("n1", 4), at=utcnow()), engine)
    assert session.get(Node, "n2").container_engine == "docker"  # type: ignore[union-attr]
    assert boxed.status is JobStatus.SCHEDULED, boxed.reason
    assert {r.node_id for r in jobs.read_replicas(session=session, job=boxed)} == {"n2"}
    starts = [m for m in result.messages if isinstance(m, StartReplica)]
    assert {m.spec.image for m in starts if m.spec.job_id == boxed.id} == {"localhost/team-tf:1"}
