"""The store's layout: every key Cohort reads or writes is made here, and nowhere else.

bundles/<sha256 hex>.tar.gz
jobs/<job_id>/checkpoints/...           the newest checkpoint state, mirrored as written
jobs/<job_id>/model/...                 the saved model
jobs/<job_id>/tensorboard/replica-<i>/...
jobs/<job_id>/logs/attempt-<n>/replica-<i>.log
data/<project_id>/<path>                a project's data (`cohort data push`)
"""

from __future__ import annotations

import posixpath
import re

_HEX64 = re.compile(r"[0-9a-f]{64}")
_SEGMENT_BAD = re.compile(r"[\x00-\x1f\x7f\\]")
MAX_KEY_LENGTH = 1024


class InvalidKey(ValueError):
    """A key that could escape the store's root or that no layout function makes."""


def check_key(key: str, *, allow_empty: bool = False) -> str:
    """Return `key` unchanged if it is a safe relative key (no `..`, no leading `/`).

    Raises:
        InvalidKey: an absolute key, a `.`/`..`/empty segment, a backslash or a control
            character (each could name a path outside the store's root on some backend).
    """
    if key == "" and allow_empty:
        return key
    if not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidKey(f"key must be 1..{MAX_KEY_LENGTH} characters")
    if key.startswith("/"):
        raise InvalidKey(f"key {key!r} must be relative (no leading '/')")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidKey(f"key {key!r} has an empty, '.' or '..' segment")
        if _SEGMENT_BAD.search(segment):
            raise InvalidKey(f"key {key!r} has a backslash or a control character")
    return key


def check_prefix(prefix: str) -> str:
    """A directory-like prefix: a key without its trailing '/', or '' for the root."""
    return check_key(prefix.rstrip("/"), allow_empty=True)


def join(*parts: str) -> str:
    """Join key parts with '/' and check the result."""
    return check_key(posixpath.join(*[p.strip("/") for p in parts if p.strip("/")]))


def bundle_digest_hex(digest: str) -> str:
    """The 64 hex digits of `sha256:<hex>` or `<hex>` (lower-cased).

    Raises:
        ValueError: anything else.
    """
    value = digest.strip().lower().removeprefix("sha256:")
    if not _HEX64.fullmatch(value):
        raise ValueError(f"{digest!r} is not a sha256 digest: give 'sha256:' and 64 hex digits")
    return value


def bundle_key(digest: str) -> str:
    return f"bundles/{bundle_digest_hex(digest)}.tar.gz"


def job_prefix(job_id: int) -> str:
    return f"jobs/{int(job_id)}"


def checkpoints_prefix(job_id: int) -> str:
    return f"{job_prefix(job_id)}/checkpoints"


def model_prefix(job_id: int) -> str:
    return f"{job_prefix(job_id)}/model"


def tensorboard_prefix(job_id: int, replica: int) -> str:
    return f"{job_prefix(job_id)}/tensorboard/replica-{int(replica)}"


def log_key(job_id: int, attempt: int, replica: int) -> str:
    return f"{job_prefix(job_id)}/logs/attempt-{int(attempt)}/replica-{int(replica)}.log"


DATA_PREFIX = "data"  # how a job's `inputs` name data: "data/<path>"
MAX_DATA_PATH_LENGTH = 900  # room for data/<project_id>/ within MAX_KEY_LENGTH
MAX_SEGMENT_BYTES = 255


def check_data_path(path: str) -> str:
    """Return `path` if it can name a file of a project's data: a relative key (no
    leading '/', no `.`/`..`/empty segment, no backslash or control character).

    Raises:
        InvalidKey: naming what is wrong.
    """
    if len(path) > MAX_DATA_PATH_LENGTH:
        raise InvalidKey(f"a data path is at most {MAX_DATA_PATH_LENGTH} characters")
    # A local store keeps each segment as a file name: at most 255 bytes on every file
    # system (past it, writing fails with ENAMETOOLONG).
    if any(len(segment.encode()) > MAX_SEGMENT_BYTES for segment in path.split("/")):
        raise InvalidKey(f"a segment of {path[:60]!r} is over {MAX_SEGMENT_BYTES} bytes")
    return check_key(path)


def data_prefix(project_id: int) -> str:
    return f"{DATA_PREFIX}/{int(project_id)}"


def data_key(project_id: int, path: str) -> str:
    """The store key of `path` in a project's data."""
    return f"{data_prefix(project_id)}/{check_data_path(path)}"
