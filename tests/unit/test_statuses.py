import itertools

import pytest

from services.statuses import (
    ALLOWED_TRANSITIONS,
    TERMINAL_STATUSES,
    JobStatus,
    is_allowed,
)

ALLOWED = {
    (JobStatus.QUEUED, JobStatus.SCHEDULED),
    (JobStatus.QUEUED, JobStatus.FAILED),
    (JobStatus.QUEUED, JobStatus.CANCELLED),
    (JobStatus.SCHEDULED, JobStatus.RUNNING),
    (JobStatus.SCHEDULED, JobStatus.RESTARTING),
    (JobStatus.SCHEDULED, JobStatus.FAILED),
    (JobStatus.SCHEDULED, JobStatus.CANCELLED),
    (JobStatus.RUNNING, JobStatus.SUCCEEDED),
    (JobStatus.RUNNING, JobStatus.FAILED),
    (JobStatus.RUNNING, JobStatus.CANCELLED),
    (JobStatus.RUNNING, JobStatus.RESTARTING),
    (JobStatus.RESTARTING, JobStatus.QUEUED),
    (JobStatus.RESTARTING, JobStatus.FAILED),
    (JobStatus.RESTARTING, JobStatus.CANCELLED),
}
PAIRS = list(itertools.product(JobStatus, JobStatus))


@pytest.mark.parametrize(("current", "target"), [p for p in PAIRS if p in ALLOWED])
def test_allowed_edges(current: JobStatus, target: JobStatus) -> None:
    assert is_allowed(current, target)


@pytest.mark.parametrize(("current", "target"), [p for p in PAIRS if p not in ALLOWED])
def test_banned_edges(current: JobStatus, target: JobStatus) -> None:
    assert not is_allowed(current, target)


def test_terminal_statuses_are_final() -> None:
    for status in TERMINAL_STATUSES:
        assert ALLOWED_TRANSITIONS[status] == frozenset()


def test_no_status_moves_to_itself() -> None:
    for status in JobStatus:
        assert not is_allowed(status, status)
