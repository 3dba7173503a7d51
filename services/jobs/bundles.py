"""Code bundles on the control plane: which project uploaded which digest, and uploads.

A project sees only the digests it uploaded itself: a bundle stored for another project
is still uploaded again in full (and then stored nothing new), so no project can learn
from a HEAD or a job spec that another one holds some code.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import sqlalchemy as sa
from cachetools import LRUCache
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from services.exceptions import BundleNotFound, BundleTooLarge, InvalidBundle, InvalidJobSpec
from services.jobs.uploads import SpooledUpload
from services.models import Bundle
from services.settings import Settings
from services.storage.bundles import BundleRejected, Limits, check_archive, read_top_file
from services.storage.keys import bundle_digest_hex, bundle_key
from services.storage.store import ArtifactStore, open_store
from services.wire.requirements import RequirementRefused, normalise_requirements

if TYPE_CHECKING:
    from services.jobs.schemas import JobCreate

# Short transactions, each committed as its block ends (services.db.session_scope).
Transactions = Callable[[], AbstractContextManager[Session]]


def normalise_digest(digest: str) -> str:
    """`sha256:<hex>` from either accepted form; InvalidBundle names the field otherwise."""
    try:
        return "sha256:" + bundle_digest_hex(digest)
    except ValueError as exc:
        raise InvalidBundle("digest", str(exc)) from exc


def limits_of(settings: Settings) -> Limits:
    return Limits(
        max_bytes=settings.MAX_BUNDLE_BYTES,
        max_files=settings.MAX_BUNDLE_FILES,
        max_unpacked_bytes=settings.MAX_BUNDLE_UNPACKED_BYTES,
    )


def read_bundle(*, session: Session, project_id: int, digest: str) -> Bundle | None:
    """The project's record of `digest`, if it uploaded it."""
    return session.execute(
        sa.select(Bundle).where(
            Bundle.project_id == project_id, Bundle.digest == normalise_digest(digest)
        )
    ).scalar_one_or_none()


def check_bundle(*, session: Session, project_id: int, digest: str | None) -> None:
    """Raise BundleNotFound unless `digest` is None or a bundle this project uploaded."""
    if (
        digest is not None
        and read_bundle(session=session, project_id=project_id, digest=digest) is None
    ):
        raise BundleNotFound(normalise_digest(digest))


class BundleUpload(SpooledUpload):
    """A bundle's body on its way in, with the digest its URL names (checked once it is
    all in, by accept_bundle)."""

    def __init__(self, *, digest: str, settings: Settings) -> None:
        self.expected = normalise_digest(digest)
        limit = settings.MAX_BUNDLE_BYTES
        super().__init__(
            settings=settings,
            limit=limit,
            too_large=lambda: BundleTooLarge(limit),
            prefix="bundle-",
            suffix=".tar.gz",
        )


def accept_bundle(
    *,
    transaction: Transactions,
    project_id: int,
    upload: BundleUpload,
    settings: Settings,
    store: ArtifactStore | None = None,
) -> tuple[Bundle, bool]:
    """Verify a received upload, store its blob (once per digest) and record it for the
    project. Returns the record and whether the project gains it now.

    Unlike the other services here it commits, in two short transactions of
    `transaction`: whether the project has the digest, then its record. The archive is
    read and checked between them with no session open (seconds for one that unpacks to a
    gigabyte): on SQLite a transaction open meanwhile could hold the one write lock that
    every other project's submissions wait for. Call it from a worker thread.

    Raises:
        InvalidBundle: the body's digest is not the one named, or the archive is refused
            (absolute paths, `..`, links outside, devices, too many files, too large).
    """
    upload.finish()
    if upload.digest != upload.expected:
        raise InvalidBundle(
            "digest",
            f"the body's sha256 is {upload.digest}, not "
            f"{upload.expected} as the URL names: upload the bundle again",
        )
    with transaction() as session:
        existing = read_bundle(session=session, project_id=project_id, digest=upload.expected)
    if existing is not None:
        return existing, False
    files = check_upload(upload, settings)
    store = store or open_store(settings=settings)
    key = bundle_key(upload.expected)
    # Stored before it is recorded: a record never names a blob the store lacks. A blob
    # left by a failed commit is the same bytes the next upload of that digest stores.
    if not store.exists(key):
        store.put_file(key, upload.path)
    with transaction() as session:
        return record_bundle(session=session, project_id=project_id, upload=upload, files=files)


def check_upload(upload: BundleUpload, settings: Settings) -> int:
    """The received archive's file count, read through once within the configured limits
    (COHORT_MAX_BUNDLE_FILES, COHORT_MAX_BUNDLE_UNPACKED_BYTES); never unpacked, never
    held whole in memory. InvalidBundle if it is refused."""
    try:
        return check_archive(upload.path, limits_of(settings))
    except BundleRejected as exc:
        raise InvalidBundle("body", f"the bundle is refused: {exc}") from exc


def record_bundle(
    *, session: Session, project_id: int, upload: BundleUpload, files: int
) -> tuple[Bundle, bool]:
    """Record a checked and stored upload for the project; the record and whether it is
    new (False when the same project's concurrent upload of it recorded it first)."""
    bundle = Bundle(project_id=project_id, digest=upload.expected, size=upload.size, files=files)
    try:
        with session.begin_nested():
            session.add(bundle)
            session.flush()
    except IntegrityError:  # the same project uploading the same digest concurrently
        existing = read_bundle(session=session, project_id=project_id, digest=upload.expected)
        if existing is None:
            raise
        return existing, False
    return bundle, True


REQUIREMENTS_FILE = "requirements.txt"
MAX_REQUIREMENTS_BYTES = 256 * 1024
# A bundle's bytes never change under its digest: its requirements.txt is read once per
# process, not on every submission of the same code (a sweep submits hundreds).
_TOP_FILES_KEPT = 256
_top_files: LRUCache[str, bytes | None] = LRUCache(maxsize=_TOP_FILES_KEPT)
_top_files_lock = threading.Lock()


def read_bundle_file(
    *, digest: str, name: str, settings: Settings, store: ArtifactStore | None = None
) -> bytes | None:
    """The top-level file `name` of a stored bundle (None: it has none), at most
    MAX_REQUIREMENTS_BYTES. InvalidBundle names the file and the fix otherwise."""
    key = f"{normalise_digest(digest)}/{name}"
    with _top_files_lock:
        if key in _top_files:  # None when the bundle has no such file
            return _top_files[key]
    store = store or open_store(settings=settings)
    try:
        with store.open_read(bundle_key(normalise_digest(digest))) as handle:
            found = read_top_file(handle, name, limits_of(settings), MAX_REQUIREMENTS_BYTES)
    except BundleRejected as exc:
        raise InvalidBundle("bundle", f"the bundle's {exc}") from exc
    except FileNotFoundError:
        # Recorded but not in the store (a store restored from an older copy): the agent
        # refuses the bundle when it fetches it, saying so; nothing is remembered here.
        return None
    with _top_files_lock:
        _top_files[key] = found
    return found


def job_requirements(
    *, job_in: JobCreate, settings: Settings, store: ArtifactStore | None, bundle_pending: bool
) -> list[str]:
    """The normalised requirement lines a submission's environment installs: its `pip`
    (checked by the schema already), or its bundle's requirements.txt (not both); none
    for a job with an `image`, whose packages are the image's.

    Raises:
        InvalidJobSpec: requirements.txt and `pip` both given, or a line of it refused,
            or requirements for a job with an `image`.
        InvalidBundle: requirements.txt is not a file, or too large.
    """
    lines = _requirement_lines(job_in, settings, store, bundle_pending)
    if lines and job_in.image is not None:
        given = "`pip`" if job_in.pip else f"the bundle's {REQUIREMENTS_FILE}"
        raise InvalidJobSpec(
            "image",
            f"a job with an `image` runs the image's packages, and {given} asks for more: "
            "install them in the image (`RUN python -m pip install ...` in its Dockerfile), "
            f"or drop `image` to have the node install them",
        )
    return lines


def _requirement_lines(
    job_in: JobCreate, settings: Settings, store: ArtifactStore | None, bundle_pending: bool
) -> list[str]:
    if job_in.bundle is None or bundle_pending:
        return list(job_in.pip)
    found = read_bundle_file(
        digest=job_in.bundle, name=REQUIREMENTS_FILE, settings=settings, store=store
    )
    if found is None:
        return list(job_in.pip)
    if job_in.pip:
        raise InvalidJobSpec(
            "pip",
            f"the bundle has a {REQUIREMENTS_FILE} at its top level and the spec gives "
            f"`pip` too: keep one (move the `pip` lines into {REQUIREMENTS_FILE}, or "
            "rename the file)",
        )
    text = found.decode("utf-8", errors="replace")
    try:
        return normalise_requirements(text.splitlines(), REQUIREMENTS_FILE)
    except RequirementRefused as exc:
        raise InvalidJobSpec("bundle", f"{exc} (in the bundle's {REQUIREMENTS_FILE})") from exc
