"""Code bundles and artifacts from the command line: `cohort bundle push DIR`,
`cohort artifacts JOB`, `cohort download JOB [PATH] -o DIR`, and the `--code DIR` of
`cohort submit` (pack with .cohortignore, check the size, HEAD, then PUT)."""

from __future__ import annotations

import os
import posixpath
import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from cli.client import CohortClient
from cli.options import JobArg, JsonOpt, TokenOpt, UrlOpt, connect, console, emit_json, err, guarded
from services.settings import get_settings
from services.storage.bundles import BundleInfo, BundleRejected, Limits, pack, unpack

bundle_app = typer.Typer(help="Code bundles: pack and upload a directory.", no_args_is_help=True)
# Downloads are the job's own outputs, not code: the same checks on what an archive
# holds (no absolute paths, `..`, links out, devices), with room for large models.
DOWNLOAD_LIMITS = Limits(max_files=1_000_000, max_unpacked_bytes=1 << 50)


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f}"


def push_bundle(client: CohortClient, directory: Path, say: Console) -> BundleInfo:
    """Pack `directory` and upload it unless the project has it; exits 2 on refusal."""
    limit = get_settings().MAX_BUNDLE_BYTES
    with tempfile.TemporaryDirectory(prefix="cohort-bundle-") as scratch:
        archive = Path(scratch) / "bundle.tar.gz"
        try:
            info = pack(directory, archive)
        except BundleRejected as exc:
            err.print(f"[red]cannot pack {directory}:[/] {exc}")
            raise typer.Exit(2) from exc
        if info.size > limit:
            err.print(
                f"[red]bundle is {_mib(info.size)} MiB, over the limit of "
                f"{_mib(limit)} MiB[/] (COHORT_MAX_BUNDLE_BYTES): list large files in "
                f"{directory}/.cohortignore and read data from the artifact store"
            )
            raise typer.Exit(2)
        if guarded(lambda: client.has_bundle(info.digest)):
            say.print(
                f"bundle {info.digest} ({info.files} files, {_mib(info.size)} MiB) "
                "is already uploaded"
            )
        else:
            guarded(lambda: client.upload_bundle(info.digest, archive))
            say.print(f"uploaded bundle {info.digest} ({info.files} files, {_mib(info.size)} MiB)")
    return info


@bundle_app.command("push")
def bundle_push(
    directory: Annotated[
        Path, typer.Argument(help="the code directory", exists=True, file_okay=False)
    ],
    token: TokenOpt = None,
    url: UrlOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pack and upload a directory; prints its digest (for a job's or schedule's `bundle`)."""
    info = push_bundle(connect(url, token), directory, err)
    if as_json:
        emit_json({"digest": info.digest, "size": info.size, "files": info.files})
    else:
        typer.echo(info.digest)


def register(app: typer.Typer) -> None:
    """Add `bundle`, `artifacts` and `download` to the `cohort` app."""
    app.add_typer(bundle_app, name="bundle")

    @app.command("artifacts")
    def list_artifacts(
        job_id: JobArg, token: TokenOpt = None, url: UrlOpt = None, as_json: JsonOpt = False
    ) -> None:
        """List a job's artifacts: path, size and sha256."""
        items = guarded(lambda: connect(url, token).artifacts(job_id))
        if as_json:
            emit_json(items)
            return
        table = Table("path", "size", "sha256")
        for item in items:
            table.add_row(item["path"], str(item["size"]), item["sha256"][:16])
        console.print(table)

    @app.command("download")
    def download(
        job_id: JobArg,
        path: Annotated[str, typer.Argument(help="e.g. model; omitted: everything")] = "",
        output: Annotated[Path, typer.Option("--output", "-o", help="directory to write")] = Path(
            "."
        ),
        token: TokenOpt = None,
        url: UrlOpt = None,
    ) -> None:
        """Download an artifact: a file as it is, a directory unpacked (checked) into -o."""
        written = save_artifact(connect(url, token), job_id, path, output)
        console.print(f"wrote {written}")


def save_artifact(client: CohortClient, job_id: int, path: str, output: Path) -> Path:
    """Download `path` of the job into `output`: a file as itself, a .tar.gz unpacked with
    the bundle checks. Returns what was written."""
    output.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=output, prefix=".cohort-download-")
    os.close(fd)
    try:
        kind = guarded(lambda: client.download(job_id, path, Path(partial)))
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
