"""The local stack's secrets kept on disk (bootstrap token, signing key, Redis password):
made on first use, written whole with mode 0600, never through a link."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.data_dir import write_private


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
