"""A `cohort up` stack of a benchmark's own: a fresh PostgreSQL database on this host's
server, an embedded redis-server and the api on free ports, its data under a scratch
directory; the database dropped when it stops."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.pg import DEFAULT_SERVER, drop_database, new_database
from cli.stack import Stack
from cohort.client import Client
from tests.e2e.conftest import free_port


@contextmanager
def scratch_stack(
    scratch: Path, name: str, env: dict[str, str] | None = None
) -> Iterator[tuple[Stack, Client]]:
    """The running stack and a client of it (120 s timeout). `scratch` is made passable
    (o+x) for replicas, which a root agent runs as their job's uid."""
    scratch.chmod(0o711)
    database = new_database(DEFAULT_SERVER, f"cohort_bench_{name}")
    stack = Stack(
        {
            "COHORT_DATA_DIR": str(scratch / "var"),
            "COHORT_DATABASE_URL": database,
            "COHORT_API_PORT": str(free_port()),
            "COHORT_EMBEDDED_REDIS_PORT": str(free_port()),
            **(env or {}),
        },
        quiet=True,
    )
    try:
        stack.start()
        yield stack, Client(stack.url, stack.token, timeout=120)
    finally:
        stack.stop()
        drop_database(DEFAULT_SERVER, database)
