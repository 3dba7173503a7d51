"""The spellings the CLI had before every group was named by one singular noun.

They keep working for one release: the top-level group rewrites an old spelling into the
new one before parsing and prints one line on stderr naming it. They are not commands of
the app, so `--help` and the generated reference page never show them. Remove this table
(and `AliasedGroup`) in the release after.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

# old words -> new words; the longest matching prefix of the command line wins.
OLD_SPELLINGS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("jobs",): ("job", "list"),
    ("get",): ("job", "show"),
    ("submit",): ("job", "submit"),
    ("cancel",): ("job", "cancel"),
    ("logs",): ("job", "logs"),
    ("metrics",): ("job", "metrics"),
    ("nodes",): ("node", "list"),
    ("nodes", "list"): ("node", "list"),
    ("nodes", "drain"): ("node", "drain"),
    ("nodes", "undrain"): ("node", "undrain"),
    ("artifacts",): ("artifact", "list"),
    ("download",): ("artifact", "download"),
    ("schedules",): ("schedule",),
    ("schedules", "get"): ("schedule", "show"),
    ("schedules", "trigger"): ("schedule", "run"),
    ("tokens",): ("token",),
    ("data", "ls"): ("data", "list"),
    ("data", "rm"): ("data", "delete"),
}


def new_spelling(args: list[str]) -> tuple[list[str], str | None]:
    """`args` in today's spelling, and the line saying so (None when they already were)."""
    for size in (2, 1):
        old = tuple(args[:size])
        if len(old) == size and old in OLD_SPELLINGS:
            new = OLD_SPELLINGS[old]
            line = (
                f"cohort: `cohort {' '.join(old)}` is now `cohort {' '.join(new)}`; "
                "the old spelling goes in the next release"
            )
            return [*new, *args[size:]], line
    return args, None


class AliasedGroup(TyperGroup):
    """The `cohort` group: accepts the old spellings, saying the new one on stderr."""

    # ctx: the Context of the click that typer vendors, which it does not export.
    def parse_args(self, ctx: Any, args: list[str]) -> Any:
        args, line = new_spelling(list(args))
        if line is not None:
            typer.echo(line, err=True)
        return super().parse_args(ctx, args)
