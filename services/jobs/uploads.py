"""Request bodies on their way into the store: spooled to DATA_DIR/uploads, hashed as they
arrive, refused as soon as they pass their limit. Code bundles and project data share it."""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

from services.exceptions import CohortError
from services.settings import Settings


def spool_dir(settings: Settings) -> str:
    path = settings.data_dir / "uploads"
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


def clear_stale_uploads(*, settings: Settings, older_than: float = 3600.0) -> int:
    """Delete spool files an api process left when it died mid-upload; returns how many.
    An hour without a write: a live upload writes its spool file with every chunk."""
    spool = settings.data_dir / "uploads"
    cleared = 0
    if spool.is_dir():
        cutoff = time.time() - older_than
        for path in spool.iterdir():
            try:
                if path.is_file() and path.stat().st_mtime < cutoff:
                    path.unlink()
                    cleared += 1
            except FileNotFoundError:
                pass  # another api process cleared it first
    return cleared


class SpooledUpload:
    """One body on its way in: written to a temporary file under DATA_DIR/uploads and
    hashed as it arrives; `too_large()` is raised as soon as it passes `limit` (nothing past
    it is read). The file is removed when the `with` block ends."""

    def __init__(
        self,
        *,
        settings: Settings,
        limit: int,
        too_large: Callable[[], CohortError],
        prefix: str,
        suffix: str = "",
    ) -> None:
        self.limit = limit
        self._too_large = too_large
        handle, self.path = tempfile.mkstemp(dir=spool_dir(settings), prefix=prefix, suffix=suffix)
        self._file = os.fdopen(handle, "wb")
        self._hash = hashlib.sha256()
        self.size = 0

    def check_declared_length(self, length: str | None) -> None:
        """Refuse at once a body whose Content-Length is already past the limit."""
        if length and length.isdigit() and int(length) > self.limit:
            raise self._too_large()

    def write(self, chunk: bytes) -> None:
        if self.size + len(chunk) > self.limit:
            raise self._too_large()
        self._file.write(chunk)
        self._hash.update(chunk)
        self.size += len(chunk)

    def finish(self) -> None:
        """The body is all in: close the spool file so its bytes can be read back."""
        self._file.close()

    @property
    def digest(self) -> str:
        return f"sha256:{self._hash.hexdigest()}"

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._file.close()
        os.unlink(self.path)  # the store has its own copy by now, or it was refused
