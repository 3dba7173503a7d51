"""What a project's data holds, as digests: of one file, or of every file under a prefix.

Data-triggered schedules fire once per new digest, a model version's lineage names the
digests of its inputs, and an evaluation judges two models on one holdout digest. The
digests live in SQL (`data_files`), written by the api as each upload or delete answers,
so asking "has anything under this prefix changed?" (`newest_change`) is one indexed
query and never a listing of the store. `content_digest` does list the store, and hashes
again any file whose store version differs from the recorded one (stored before the
table existed, or changed behind Cohort's back), so a digest always names what is there.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.jobs.data import data_key
from services.models import DataFileRecord, utcnow
from services.storage import keys
from services.storage.store import ArtifactStore

_HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class DataVersion:
    """The content of `path` (a file, or a prefix of files) of a project's data."""

    path: str  # as asked, relative to the project's data ("" = all of it)
    digest: str  # "sha256:<hex>": a file's own; for a prefix, over its files' (digest_of)
    files: int
    size: int
    updated_at: dt.datetime  # the newest change at or under `path` (upload or delete)
    # {name relative to `path` (a file: its own name): store key} of exactly the files the
    # digest was taken over: what a job given "this digest's files" reads, from one listing.
    members: dict[str, str] = field(default_factory=dict)


def digest_of(files: list[tuple[str, str]]) -> str:
    """A prefix's digest: sha256 over the sorted "relpath\\0sha256:<hex>\\n" lines of its
    files, so it changes when any file's content, name or presence does."""
    lines = "".join(f"{rel}\0{sha}\n" for rel, sha in sorted(files))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def at_or_under(path: Any) -> sa.ColumnElement[bool]:
    """The data_files rows of `path` (a string, or a column such as a trigger's path) and of
    every file under it as a prefix: its `\\`, `%` and `_` escaped, never LIKE wildcards
    (in Python for a string, so the planner sees a constant; in SQL for a column)."""
    pattern: Any = path
    for char in ("\\", "%", "_"):
        if isinstance(path, str):
            pattern = pattern.replace(char, "\\" + char)
        else:
            pattern = sa.func.replace(pattern, char, "\\" + char, type_=sa.String)
    rows: sa.ColumnElement[bool] = (DataFileRecord.path == path) | DataFileRecord.path.like(
        pattern + "/%", escape="\\"
    )
    return rows


def _under(project_id: int, path: str) -> sa.ColumnElement[bool]:
    """The rows of a project's `path` itself and of every file under it as a prefix."""
    here = DataFileRecord.project_id == project_id
    return here & at_or_under(path) if path else here


def _upsert(session: Session, project_id: int, path: str, **values: object) -> None:
    where = (DataFileRecord.project_id == project_id) & (DataFileRecord.path == path)
    row = session.execute(sa.select(DataFileRecord).where(where).with_for_update()).scalar()
    if row is None:
        try:
            with session.begin_nested():
                session.add(DataFileRecord(project_id=project_id, path=path, **values))
            return
        except IntegrityError:  # recorded by a concurrent upload since the select
            row = session.execute(
                sa.select(DataFileRecord).where(where).with_for_update()
            ).scalar_one()
    for name, value in values.items():
        setattr(row, name, value)


def record_file(
    *, session: Session, store: ArtifactStore, project_id: int, path: str, sha256: str | None
) -> None:
    """Record what the store now holds at `path`, just uploaded with digest `sha256` (the
    store's version is read after the write, so a racing upload's bytes are hashed again
    at the next content_digest rather than taken for these)."""
    stat = store.version(data_key(project_id, path))
    if stat is None:  # deleted since: a delete's record follows
        return
    size, version = stat
    _upsert(
        session,
        project_id,
        path,
        sha256=sha256,
        size=size,
        store_version=version,
        updated_at=utcnow(),
    )


def record_deleted(*, session: Session, project_id: int, path: str) -> None:
    """Record that `path` was deleted (a tombstone: the change is newer than any upload)."""
    _upsert(session, project_id, path, sha256=None, size=0, store_version="", updated_at=utcnow())


def newest_change(*, session: Session, project_id: int, path: str) -> dt.datetime | None:
    """When anything at or under `path` last changed as Cohort saw it (SQL only)."""
    if path:
        data_key(project_id, path)
    return session.execute(
        sa.select(sa.func.max(DataFileRecord.updated_at)).where(_under(project_id, path))
    ).scalar()


def _sha256(store: ArtifactStore, key: str) -> str:
    digest = hashlib.sha256()
    with store.open_read(key) as stream:
        while chunk := stream.read(_HASH_CHUNK):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def _listing(store: ArtifactStore, project_id: int, path: str) -> dict[str, tuple[int, str]]:
    """path -> (size, store version) of the file at `path` or of every file under it."""
    prefix = keys.data_prefix(project_id)
    if path:
        stat = store.version(data_key(project_id, path))
        if stat is not None:
            return {path: stat}
    head = f"{prefix}/{path}" if path else prefix
    return {
        key[len(prefix) + 1 :]: (size, version) for key, size, version in store.list_versions(head)
    }


def content_digest(
    *, session: Session, store: ArtifactStore, project_id: int, path: str
) -> DataVersion | None:
    """The digest of `path` (a file, or every file under it); None when nothing is there.

    Raises:
        InvalidDataPath: `path` cannot name data (services/jobs/data.py data_key).
    """
    if path:
        data_key(project_id, path)
    listing = _listing(store, project_id, path)
    rows = {
        row.path: row
        for row in session.execute(
            sa.select(DataFileRecord).where(_under(project_id, path))
        ).scalars()
    }
    files: list[tuple[str, str]] = []
    for name, (size, version) in sorted(listing.items()):
        row = rows.get(name)
        if row is None or row.sha256 is None or row.store_version != version:
            sha = _sha256(store, data_key(project_id, name))
            _upsert(
                session,
                project_id,
                name,
                sha256=sha,
                size=size,
                store_version=version,
                updated_at=utcnow(),
            )
        else:
            sha = row.sha256
        files.append((name, sha))
    for name, row in rows.items():  # gone from the store without a delete through Cohort
        if name not in listing and row.sha256 is not None:
            record_deleted(session=session, project_id=project_id, path=name)
    if not files:
        return None
    session.flush()
    single = path in listing and len(listing) == 1
    base = f"{path}/" if path else ""
    relative = {n: n.rsplit("/", 1)[-1] if single else n[len(base) :] for n, _ in files}
    digest = files[0][1] if single else digest_of([(relative[n], s) for n, s in files])
    newest = newest_change(session=session, project_id=project_id, path=path)
    return DataVersion(
        path=path,
        digest=digest,
        files=len(files),
        size=sum(size for size, _ in listing.values()),
        updated_at=newest or utcnow(),
        members={relative[n]: data_key(project_id, n) for n, _ in files},
    )
