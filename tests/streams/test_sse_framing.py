"""The streams' own SSE framing (api/routes/streams.py `_encode`) writes exactly what
FastAPI's `format_sse_event` writes for the same event, whatever the data holds."""

from __future__ import annotations

import orjson
import pytest
from fastapi.sse import format_sse_event

from api.routes.streams import _encode
from services.telemetry.cursor import Event
from services.wire.feed import LogRow, MetricRow

EVENTS = [
    Event("metric", "7.0.3", MetricRow(7, 1, 0, 12, None, "loss", 0.25, 1700000000.5)),
    Event("metric", "8.0.3", MetricRow(8, 1, 1, 12, 2, "val/accuracy", float("nan"), 1.0), True),
    # Line breaks of every kind SSE knows, and other separators, inside a log line.
    Event("log", "8.9.3", LogRow(9, 1, 0, 2.0, "a\nb\r\nc\rd\u2028e\x00f: id: 1")),
    Event("status", "8.9.4", {"status": "failed", "reason": "OOM\nkilled", "name": "é😀"}),
    Event("job", None, {"queue_position": 3, "replicas": []}),
]


@pytest.mark.parametrize("event", EVENTS, ids=[e.kind for e in EVENTS])
def test_an_event_is_framed_as_format_sse_event_frames_it(event: Event) -> None:
    data = event.data if isinstance(event.data, dict) else event.data.payload()
    expected = format_sse_event(data_str=orjson.dumps(data).decode(), event=event.kind, id=event.id)
    assert _encode(event) == expected
    # One `data:` line: a client's EventSource parses the JSON back whole.
    assert _encode(event).count(b"\ndata: ") == 1 and _encode(event).endswith(b"\n\n")
