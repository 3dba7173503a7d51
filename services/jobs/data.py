"""A project's data in the artifact store: upload, list, delete, and the checks on paths.

Each project's files live under `data/<project_id>/` (services/storage/keys.py); every
path is checked and taken relative to that prefix, so no project reads, lists or deletes
another one's data. The store is the record: there is no SQL table, so what a listing
shows is what a job's replicas would be given.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from services.exceptions import DataNotFound, DataPathConflict, DataTooLarge, InvalidDataPath
from services.jobs.uploads import SpooledUpload
from services.settings import Settings
from services.storage import keys
from services.storage.store import ArtifactStore

_FIX = "give a relative path such as 'digits/train.csv'"


@dataclass(frozen=True)
class DataFile:
    path: str  # relative to the project's data
    size: int
    sha256: str | None = None  # known right after an upload


def data_key(project_id: int, path: str) -> str:
    """The store key of `path` in the project's data.

    Raises:
        InvalidDataPath: absolute, `..`, an empty segment, a backslash or a control byte.
    """
    try:
        return keys.data_key(project_id, path)
    except keys.InvalidKey as exc:
        raise InvalidDataPath("path", f"{exc}: {_FIX}") from exc


class DataUpload(SpooledUpload):
    """A data file's body on its way in (at most COHORT_MAX_DATA_BYTES)."""

    def __init__(self, *, settings: Settings) -> None:
        limit = settings.MAX_DATA_BYTES
        super().__init__(
            settings=settings, limit=limit, too_large=lambda: DataTooLarge(limit), prefix="data-"
        )


def check_free(store: ArtifactStore, project_id: int, path: str) -> str:
    """The key of `path` if a file may be stored there: not a directory of other files,
    and no file where one of its parent directories would be (a local store cannot hold
    both, so neither may S3).

    Raises:
        InvalidDataPath, DataPathConflict.
    """
    key = data_key(project_id, path)
    if store.list(key):
        raise DataPathConflict(
            "path",
            f"{path!r} is a directory of other data: pick "
            "another path, or `cohort data delete` what is under it",
        )
    parent = posixpath.dirname(path)
    while parent:
        if store.exists(data_key(project_id, parent)):
            raise DataPathConflict(
                "path", f"{parent!r} is a file, so {path!r} cannot be under it: pick another path"
            )
        parent = posixpath.dirname(parent)
    return key


def store_data(
    *, store: ArtifactStore, project_id: int, path: str, upload: DataUpload
) -> tuple[DataFile, bool]:
    """Put a received upload at `path` of the project's data, replacing any file there.
    Returns the file and whether it is new (False: it replaced one)."""
    upload.finish()
    key = check_free(store, project_id, path)
    existed = store.exists(key)
    try:
        store.put_file(key, upload.path)
    except (IsADirectoryError, NotADirectoryError) as exc:
        # A concurrent upload made `path` a directory (or a parent a file) after the
        # check: the same conflict, found later.
        raise DataPathConflict(
            "path",
            f"{path!r} became a directory of other data, or a "
            "parent of it a file, while it was uploaded: pick another "
            "path",
        ) from exc
    return DataFile(path=path, size=upload.size, sha256=upload.digest), not existed


def list_data(*, store: ArtifactStore, project_id: int) -> list[DataFile]:
    """Every file of the project's data, by path, with its size."""
    prefix = keys.data_prefix(project_id)
    return [DataFile(path=key[len(prefix) + 1 :], size=size) for key, size in store.list(prefix)]


def data_exists(*, store: ArtifactStore, project_id: int, path: str) -> bool:
    return store.exists(data_key(project_id, path))


def delete_data(*, store: ArtifactStore, project_id: int, path: str) -> None:
    """Delete one file of the project's data.

    Raises:
        InvalidDataPath: see data_key.
        DataNotFound: the project has no file at `path`.
    """
    try:
        store.delete(data_key(project_id, path))
    except FileNotFoundError as exc:
        raise DataNotFound(path) from exc
