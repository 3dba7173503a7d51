"""How long a replica may go without progress: the job's own limit or the cluster's."""

from __future__ import annotations

import pytest

from services.cluster.hang_reasons import hang_limit


@pytest.mark.parametrize(
    ("job_limit", "expected"),
    [
        (None, 120.0),  # omitted: the cluster default
        (30, 30.0),  # the job's own, shorter or longer
        (86400, 86400.0),
        (0, None),  # no progress watchdog for this job
    ],
)
def test_the_jobs_own_limit_wins_and_zero_turns_it_off(
    job_limit: int | None, expected: float | None
) -> None:
    assert hang_limit(job_limit, 120.0) == expected


def test_a_negative_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="0 or more"):
        hang_limit(-1, 120.0)
