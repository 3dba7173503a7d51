"""A gang's start messages built at once (services/jobs/replica_specs.py start_messages):
each the message start_message builds for its replica alone."""

from __future__ import annotations

import pytest

from services.jobs.replica_specs import BY_INDEX, REPLICA_FORMS, start_message, start_messages
from services.jobs.schemas import JobCreate
from tests.unit.test_job_spec import EVERY_FIELD_SET, _Placed, _stored


def test_a_gangs_start_messages_are_those_of_each_replica_alone() -> None:
    job = _stored(JobCreate.model_validate(EVERY_FIELD_SET))
    gang = [_Placed(index=i, role_index=i, port=29500 + i, node_id=f"n{i}") for i in range(3)]
    together = start_messages(job, gang)
    assert [m.encode() for m in together] == [start_message(job, r).encode() for r in gang]
    # The job's profile names replicas 0 and 1: each gets its own form of it.
    assert [m.spec.profile is not None for m in together] == [True, True, False]
    # Each spec holds its own dicts, as one built alone does.
    first, second, _ = (m.spec for m in together)
    assert first.hyperparameters is not second.hyperparameters
    assert first.env is not second.env


@pytest.mark.parametrize("name", sorted(set(REPLICA_FORMS) - BY_INDEX))
def test_a_form_worked_out_once_per_gang_is_the_same_for_every_replica(name: str) -> None:
    """A replica form left out of BY_INDEX is computed once for the whole gang: it must
    not depend on which replica it is for."""
    job = _stored(JobCreate.model_validate(EVERY_FIELD_SET))
    assert REPLICA_FORMS[name](job, 0) == REPLICA_FORMS[name](job, 1) == REPLICA_FORMS[name](job, 5)
