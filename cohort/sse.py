"""A small Server-Sent Events reader (standard library only): the SDK, CLI and tests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    event: str
    id: str | None
    data: Any  # the JSON-decoded `data:` field


class _Parser:
    """Turns SSE lines into events (comments and keep-alive pings are skipped)."""

    def __init__(self) -> None:
        self.event: str = "message"
        self.id: str | None = None
        self.data: list[str] = []

    def feed(self, line: str) -> Event | None:
        if line == "":
            if not self.data:
                self.event = "message"
                return None
            out = Event(self.event, self.id, json.loads("\n".join(self.data)))
            self.event, self.data = "message", []
            return out
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self.event = value
        elif field == "data":
            self.data.append(value)
        elif field == "id":
            self.id = value
        return None


def parse_lines(lines: Iterable[str]) -> Iterator[Event]:
    """Events from the lines of an event stream."""
    parser = _Parser()
    for line in lines:
        event = parser.feed(line.rstrip("\r"))
        if event is not None:
            yield event


async def aparse_lines(lines: AsyncIterator[str]) -> AsyncIterator[Event]:
    """Events from the lines of an event stream (async)."""
    parser = _Parser()
    async for line in lines:
        event = parser.feed(line.rstrip("\r"))
        if event is not None:
            yield event
