"""The reads the followers of a process share (services/telemetry/shared_reads.py)."""

from __future__ import annotations

import asyncio
import time

from services.telemetry.shared_reads import STATUS_POLL, EveryJob


def test_a_shared_read_slower_than_the_poll_still_answers() -> None:
    """A read that takes longer than STATUS_POLL (a loaded database, a crowded queue to
    place the job in) answers the follower that waited for it; before, the follower found
    its answer already a poll old and started another read, for as long as reads were that
    slow, and its stream sent nothing meanwhile."""
    reads: list[list[int]] = []

    def slow_read(job_ids: list[int]) -> dict[int, str]:
        reads.append(job_ids)
        time.sleep(STATUS_POLL * 1.3)
        return {job_id: f"fingerprint {job_id}" for job_id in job_ids}

    async def follow_twice() -> list[str]:
        every = EveryJob(slow_read)
        first = await asyncio.wait_for(every(7), STATUS_POLL * 10)
        second = await asyncio.wait_for(every(7), STATUS_POLL * 10)
        return [first, second]

    assert asyncio.run(follow_twice()) == ["fingerprint 7", "fingerprint 7"]
    # The second call may read again (the first answer is older than a poll), once.
    assert 1 <= len(reads) <= 2, reads


def test_followers_of_two_jobs_share_one_read() -> None:
    reads: list[list[int]] = []

    def read(job_ids: list[int]) -> dict[int, int]:
        reads.append(sorted(job_ids))
        time.sleep(0.05)
        return {job_id: job_id * 10 for job_id in job_ids}

    async def together() -> list[int]:
        every = EveryJob(read)
        first = asyncio.ensure_future(every(1))
        await asyncio.sleep(0)  # the first follower's read has started
        second = asyncio.ensure_future(every(2))
        return list(await asyncio.gather(first, second))

    assert asyncio.run(together()) == [10, 20]
    # The second job, asked while the first read ran, comes with the read after it.
    assert reads[0] == [1] and [1, 2] in reads[1:], reads
