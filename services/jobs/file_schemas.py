"""Pydantic I/O schemas of a project's files in the artifact store: code bundles, data,
and a job's artifacts (what REST answers and the CLI prints)."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict, Field


class BundleRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    digest: str = Field(description="sha256:<hex> of the .tar.gz; name it as a job's `bundle`")
    size: int = Field(description="bytes of the .tar.gz")
    files: int = Field(description="files and links in it")
    created_at: dt.datetime


class ArtifactRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    path: str = Field(description="relative to the job's artifacts, e.g. model/saved_model.pb")
    size: int
    sha256: str


class ArtifactList(BaseModel):
    items: list[ArtifactRead]


class DataRead(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    path: str = Field(description="in the project's data; a job names it as data/<path>")
    size: int
    sha256: str | None = Field(
        None, description="sha256:<hex> of what was uploaded (only in the answer to the upload)"
    )


class DataList(BaseModel):
    items: list[DataRead]
