"""Code bundles from the command line: `cohort bundle push DIR`, and the `--code DIR` of
`cohort job submit` (pack with .cohortignore, check the size, HEAD, then PUT)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from cli.options import JsonOpt, TokenOpt, UrlOpt, connect, emit_json, err, guarded
from cli.transfers import transfer_bar
from cohort.bundles import BundleInfo, PackRefused, pack
from cohort.client import Client
from services.settings import get_settings

app = typer.Typer(
    name="bundle", help="Code bundles: pack and upload a directory.", no_args_is_help=True
)


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f}"


def push_bundle(client: Client, directory: Path, say: Console) -> BundleInfo:
    """Pack `directory` and upload it unless the project has it; exits 2 on refusal."""
    limit = get_settings().MAX_BUNDLE_BYTES
    with tempfile.TemporaryDirectory(prefix="cohort-bundle-") as scratch:
        archive = Path(scratch) / "bundle.tar.gz"
        try:
            info = pack(directory, archive)
        except PackRefused as exc:
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
            with transfer_bar("uploading code", info.size) as bar:
                guarded(lambda: client.upload_bundle(info.digest, archive, bar))
            say.print(f"uploaded bundle {info.digest} ({info.files} files, {_mib(info.size)} MiB)")
    return info


@app.command("push")
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
