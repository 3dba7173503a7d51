"""The model registry from Python (`Client` has these methods):

    client.register_version("digits", job_id=42)        # version 1, 2, ...
    client.move_alias("digits", "production", 1, reason="rollback")
    client.download_model("digits@production", "model.tar.gz")

A reference names a version as `NAME:VERSION` or `NAME@ALIAS` (`parse_ref`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from cohort import api_models as m
from cohort import calls

if TYPE_CHECKING:
    from cohort.uploads import Sink

T = TypeVar("T")
_REF = re.compile(r"(?P<name>[^:@]+)(?::(?P<version>\d+)|@(?P<alias>[^:@]+))")


def parse_ref(ref: str) -> tuple[str, int | None, str | None]:
    """(model, version, alias) of `NAME:VERSION` or `NAME@ALIAS` (one of the two is None).

    Raises:
        ValueError: neither form.
    """
    match = _REF.fullmatch(ref)
    if match is None:
        raise ValueError(
            f"{ref!r} names no model version: give NAME:VERSION (digits:3) or NAME@ALIAS "
            "(digits@production)"
        )
    version = match["version"]
    return match["name"], int(version) if version else None, match["alias"]


class RegistryMethods:
    """The registry's calls, for a client that can `send` a Call and fetch a file (the
    two methods below are Client's: declared here so the mixin is typed)."""

    def send(self, call: calls.Call[T]) -> T:
        raise NotImplementedError

    def fetch(
        self,
        call: calls.Streamed,
        dest: str | Path | Sink,
        progress: Callable[[int], None] | None = None,
    ) -> str:
        raise NotImplementedError

    def models(self) -> list[m.ModelSummary]:
        """The project's models, by name, with their aliases."""
        return self.send(calls.models())

    def model(self, name: str) -> m.ModelRead:
        """A model with its versions (newest first, with lineage) and aliases."""
        return self.send(calls.model(name))

    def model_version(self, ref: str) -> m.VersionRead:
        """The version `NAME:VERSION` or `NAME@ALIAS` names."""
        name, version = self.resolve(ref)
        return self.send(calls.model_version(name, version))

    def register_version(self, name: str, job_id: int) -> m.VersionRead:
        """Register a succeeded job's model as the model's next version."""
        return self.send(calls.register_version(name, job_id))

    def move_alias(self, name: str, alias: str, version: int, reason: str = "") -> m.AliasRead:
        """Point `alias` at `version` (a rollback is a move to an older one)."""
        return self.send(calls.move_alias(name, alias, version, reason))

    def alias_history(self, name: str, alias: str) -> m.AliasHistory:
        """Every move of the alias, newest first."""
        return self.send(calls.alias_history(name, alias))

    def resolve(self, ref: str) -> tuple[str, int]:
        """(model, version number) of a reference; an alias is asked where it points now."""
        name, version, alias = parse_ref(ref)
        if version is None:
            assert alias is not None
            version = self.send(calls.model_alias(name, alias)).version
        return name, version

    def version_files(self, ref: str) -> list[m.ArtifactRead]:
        """The version's files: path (relative to the model directory), size, sha256."""
        return self.send(calls.version_files(*self.resolve(ref)))

    def download_model(
        self,
        ref: str,
        dest: str | Path | Sink,
        progress: Callable[[int], None] | None = None,
        path: str = "",
    ) -> tuple[int, str]:
        """Stream the version's files (a .tar.gz that unpacks into the model directory;
        with `path`, that one file or directory) into `dest`: (version, Content-Type)."""
        name, version = self.resolve(ref)
        return version, self.fetch(calls.version_download(name, version, path), dest, progress)
