"""`cohort artifact list JOB`, `cohort artifact download JOB [PATH] -o DIR`: a job's
outputs in the artifact store."""

from __future__ import annotations

import os
import posixpath
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from cli.options import (
    FormatOpt,
    JobArg,
    JsonOpt,
    ListFormat,
    TokenOpt,
    UrlOpt,
    connect,
    console,
    emit_json,
    err,
    guarded,
    print_listing,
)
from cli.transfers import transfer_bar
from cohort.client import Client
from services.storage.bundles import BundleRejected, Limits, unpack

app = typer.Typer(
    name="artifact", help="Artifacts: the files a job wrote (models, logs).", no_args_is_help=True
)
# Downloads are the job's own outputs, not code: the same checks on what an archive
# holds (no absolute paths, `..`, links out, devices), with room for large models.
DOWNLOAD_LIMITS = Limits(max_files=1_000_000, max_unpacked_bytes=1 << 50)


@app.command("list")
def list_artifacts(
    job_id: JobArg,
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
    output: FormatOpt = ListFormat.table,
) -> None:
    """List a job's artifacts: path, size and sha256."""
    items = guarded(lambda: connect(url, token).artifacts(job_id))
    print_listing(
        items,
        {
            "path": lambda i: i["path"],
            "size": lambda i: i["size"],
            "sha256": lambda i: i["sha256"][:16],
        },
        as_json=as_json,
        output=output,
    )


@app.command("download")
def download(
    job_id: JobArg,
    path: Annotated[str, typer.Argument(help="e.g. model; omitted: everything")] = "",
    output: Annotated[Path, typer.Option("--output", "-o", help="directory to write")] = Path("."),
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Download an artifact: a file as it is, a directory unpacked (checked) into -o."""
    written = save_artifact(connect(url, token), job_id, path, output)
    if as_json:
        emit_json({"path": str(written)})
    else:
        console.print(f"wrote {written}")


def save_artifact(client: Client, job_id: int, path: str, output: Path) -> Path:
    """Download `path` of the job into `output`: a file as itself, a .tar.gz unpacked with
    the bundle checks. Returns what was written."""
    return save_download(lambda dest, bar: client.download(job_id, path, dest, bar), path, output)


def save_download(
    fetch: Callable[[Path, Callable[[int], None] | None], str], path: str, output: Path
) -> Path:
    """What `fetch(dest, progress)` downloads (returning its Content-Type), into `output`:
    a file as itself (named as `path`), a .tar.gz unpacked with the bundle checks (a job's
    artifact, a model version's files). Returns what was written."""
    output.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=output, prefix=".cohort-download-")
    os.close(fd)
    try:
        with transfer_bar(f"downloading {path}", None) as bar:
            kind = guarded(lambda: fetch(Path(partial), bar))
        if kind.startswith("application/gzip"):
            try:
                # replace: a second download of the same path updates the files in place
                # (never through a link: the unpacker follows none).
                unpack(partial, output, DOWNLOAD_LIMITS, replace=True)
            except BundleRejected as exc:
                err.print(f"[red]refused to unpack the download:[/] {exc}")
                raise typer.Exit(2) from exc
            except OSError as exc:
                err.print(f"[red]cannot unpack the download into {output}:[/] {exc}")
                raise typer.Exit(1) from exc
            return output / path.strip("/") if path.strip("/") else output
        target = output / posixpath.basename(path.rstrip("/"))
        os.replace(partial, target)
        return target
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
