"""A job's `inputs`: files of its project's data, checked when the job is submitted and
resolved to store keys for its replicas' spec.

A job names each as `data/<path>` ({local file name: "data/<path>"}); the store keeps it
at `data/<project_id>/<path>`. The project comes from the job, never from the spec, so a
job cannot name another project's data.
"""

from __future__ import annotations

from services.exceptions import DataNotFound
from services.models import Job
from services.settings import Settings
from services.storage import keys
from services.storage.store import ArtifactStore, open_store


def _path(source: str) -> str:
    """`<path>` of "data/<path>" (the schema refused any other form)."""
    return source.removeprefix(f"{keys.DATA_PREFIX}/")


def check_inputs_exist(
    *,
    project_id: int,
    inputs: dict[str, str],
    settings: Settings,
    store: ArtifactStore | None = None,
) -> None:
    """Raise DataNotFound naming the first input the project has no data for."""
    if not inputs:
        return
    store = store or open_store(settings=settings)
    for source in inputs.values():
        if not store.exists(keys.data_key(project_id, _path(source))):
            raise DataNotFound(_path(source))


def resolve_inputs(job: Job) -> dict[str, str]:
    """{local file name: full store key} of the job's inputs, for its replicas' spec."""
    return {
        name: keys.data_key(job.project_id, _path(source))
        for name, source in sorted((job.inputs or {}).items())
    }
