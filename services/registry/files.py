"""A version's files: what its job saved as its model (`jobs/<id>/model` in the store),
listed with their sha256 and resolved for download as a job's artifacts are
(services/jobs/artifacts.py), by path relative to the model directory."""

from __future__ import annotations

from services.exceptions import ModelNotFound
from services.jobs import artifacts
from services.models import ModelVersion
from services.storage.store import ArtifactStore


def list_files(
    *, store: ArtifactStore, version: ModelVersion, path: str = ""
) -> list[artifacts.ArtifactFile]:
    """The version's files (under its directory `path`), relative to the model directory.

    Raises:
        InvalidArtifactPath: an absolute path, or one that climbs out.
    """
    return artifacts.list_under(store=store, base=version.artifact, path=path)


def resolve_download(
    *, store: ArtifactStore, model: str, version: ModelVersion, path: str
) -> artifacts.Download:
    """One file of the version, or a directory of it (all of it: `path` empty) as a
    .tar.gz named `<model>-v<version>.tar.gz` whose entries unpack into the model directory.

    Raises:
        InvalidArtifactPath: an absolute path, or one that climbs out.
        ModelNotFound: nothing at `path`.
    """
    found = artifacts.resolve_under(
        store=store, base=version.artifact, path=path, whole=f"{model}-v{version.version}"
    )
    if found is None:
        raise ModelNotFound(f"file {path or '.'!r} of version {version.version} of {model!r}")
    return found
