"""`cohort tensorboard`'s fetch (cli/board_fetch.py) through the real API and store: a
second fetch with nothing changed downloads nothing; then only what changed comes, an
event file that grew by its new bytes alone (a Range, appended in place: TensorBoard holds
the file open and reads on), any other file whole, renamed into place."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from cli.board_fetch import BoardFetcher, BoardSource
from cohort.client import Client
from services.storage import keys
from services.storage.store import ArtifactStore, open_store
from tests.factories import create_job

EVENTS = "events.out.tfevents.1795950331.host.1.0.v2"


@pytest.fixture
def board(
    artifact_env: str,  # noqa: ARG001 - points the store
    session: Session,
    token: str,
) -> tuple[int, ArtifactStore]:
    """A job of the caller's project with two replicas' TensorBoard files and a profile."""
    from services.auth.tokens import authenticate

    job = create_job(session, authenticate(session=session, token=token).project_id, replicas=2)
    store = open_store()
    for index in (0, 1):
        store.put_bytes(f"{keys.tensorboard_prefix(job.id, index)}/{EVENTS}", os.urandom(5000))
    profile = "plugins/profile/2026_11_29_10_00_00/host.xplane.pb"
    store.put_bytes(f"{keys.tensorboard_prefix(job.id, 0)}/{profile}", b"trace" * 100)
    store.put_bytes(f"{keys.model_prefix(job.id)}/saved_model.pb", b"not TensorBoard's")
    return job.id, store


def api_client(client: TestClient, token: str) -> Client:
    """The CLI's own client, over the app in this test's transaction."""
    cohort = Client("http://testserver", token)
    client.headers["Authorization"] = f"Bearer {token}"
    cohort.http = client
    return cohort


def stored(store: ArtifactStore, job_id: int, index: int, rel: str) -> bytes:
    with store.open_read(f"{keys.tensorboard_prefix(job_id, index)}/{rel}") as handle:
        return handle.read()


def test_a_second_fetch_downloads_only_what_changed(
    client: TestClient, token: str, board: tuple[int, ArtifactStore], tmp_path: Path
) -> None:
    job_id, store = board
    requests: list[tuple[str, str | None]] = []
    client.event_hooks["request"] = [
        lambda r: requests.append((r.url.params.get("path", ""), r.headers.get("range")))
    ]
    fetcher = BoardFetcher(BoardSource(api_client(client, token)), tmp_path)
    first = fetcher.fetch(job_id)
    run0, run1 = tmp_path / f"job-{job_id}" / "replica-0", tmp_path / f"job-{job_id}" / "replica-1"
    assert first.files == 3 and len(first.downloaded) == 3 and not first.appended
    profile = "plugins/profile/2026_11_29_10_00_00/host.xplane.pb"
    assert (run0 / profile).read_bytes() == b"trace" * 100
    for index, run in ((0, run0), (1, run1)):
        assert (run / EVENTS).read_bytes() == stored(store, job_id, index, EVENTS)
    assert not (tmp_path / f"job-{job_id}" / "model").exists()  # the listing was one group

    requests.clear()
    again = fetcher.fetch(job_id)
    assert (again.files, again.downloaded, again.appended) == (3, [], [])
    assert requests == [("tensorboard", None)]  # the listing alone

    # Replica 0's event file grows (as TensorFlow appends to it); the profile is rewritten.
    grown = stored(store, job_id, 0, EVENTS) + os.urandom(700)
    store.put_bytes(f"{keys.tensorboard_prefix(job_id, 0)}/{EVENTS}", grown)
    store.put_bytes(f"{keys.tensorboard_prefix(job_id, 0)}/{profile}", b"another trace")
    inode = (run0 / EVENTS).stat().st_ino
    requests.clear()
    third = fetcher.fetch(job_id)
    assert third.appended == [f"job-{job_id}/replica-0/{EVENTS}"]
    assert third.downloaded == [f"job-{job_id}/replica-0/{profile}"]
    assert (run0 / EVENTS).read_bytes() == grown
    assert (run0 / EVENTS).stat().st_ino == inode  # the same file, read on by TensorBoard
    assert (run0 / profile).read_bytes() == b"another trace"
    assert (f"tensorboard/replica-0/{EVENTS}", "bytes=5000-5699") in requests  # 700 bytes
    assert len(requests) == 3  # the listing, the new bytes, the profile

    # A file that is not its old self plus more (rewritten) comes whole, renamed in place.
    rewritten = os.urandom(6000)
    store.put_bytes(f"{keys.tensorboard_prefix(job_id, 1)}/{EVENTS}", rewritten)
    fourth = fetcher.fetch(job_id)
    assert fourth.downloaded == [f"job-{job_id}/replica-1/{EVENTS}"] and not fourth.appended
    assert (run1 / EVENTS).read_bytes() == rewritten


def test_a_fresh_fetcher_keeps_what_a_logdir_already_holds(
    client: TestClient, token: str, board: tuple[int, ArtifactStore], tmp_path: Path
) -> None:
    """A later `cohort tensorboard --logdir DIR` fetches only what changed since the last."""
    job_id, _ = board
    source = BoardSource(api_client(client, token))
    BoardFetcher(source, tmp_path).fetch(job_id)
    later = BoardFetcher(source, tmp_path).fetch(job_id)
    assert (later.files, later.downloaded, later.appended) == (3, [], [])
