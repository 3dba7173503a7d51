"""The local stack's secrets kept on disk (bootstrap token, signing key, Redis password):
made on first use, written whole with mode 0600, never through a link."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Write `path` whole, mode 0600: a fresh file renamed over it (which replaces a
    link there rather than writing through it)."""
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def kept_secret(path: Path, make: Callable[[], str]) -> str:
    """The secret kept in `path`, else a new one from `make()`, kept there first
    (mode 0600, never written through a link)."""
    try:
        kept = path.read_text().strip()
    except FileNotFoundError:
        kept = ""
    if kept:
        return kept
    secret = make()
    write_private(path, secret + "\n")
    return secret
