"""A progress bar for what the CLI uploads and downloads (bundles, data, artifacts): on
stderr, and only on a terminal, so piped output and `--json` stay clean."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

_stderr = Console(stderr=True)


@contextlib.contextmanager
def transfer_bar(what: str, total: int | None) -> Iterator[Callable[[int], None] | None]:
    """Yields the callback an SDK transfer calls with each chunk's size (None off a
    terminal: nothing is drawn). `total`: bytes expected (None: unknown, a download)."""
    if not _stderr.is_terminal:
        yield None
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=_stderr,
        transient=True,
    ) as progress:
        task = progress.add_task(what, total=total)
        yield lambda size: progress.advance(task, size)
