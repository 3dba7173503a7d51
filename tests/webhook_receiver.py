"""A real HTTP receiver for webhook tests: a threading HTTP server on 127.0.0.1 that
records every request (time, headers, body) and answers as the test sets it: 200, an
error status, a redirect, a hang, or not at all (its socket closed: connections refused,
then opened again on the same port)."""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    at: float  # time.time() when the body was read
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """Start with `up()`; `mode` is "ok", "big" (200 with a megabyte), "error" (500),
    "redirect" (to `location`) or "hang" (no answer until `stop_hanging()`); `down()`
    closes the socket."""

    def __init__(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.received: list[Received] = []
        self.mode = "ok"
        self.location = ""
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    receiver.received.append(
                        Received(time.time(), self.path, dict(self.headers.items()), body)
                    )
                mode = receiver.mode
                if mode == "hang":
                    receiver.release.wait(60)
                    return
                if mode == "redirect":
                    self.send_response(307)
                    self.send_header("Location", receiver.location)
                elif mode == "error":
                    self.send_response(500)
                else:
                    self.send_response(200)
                answer = b"x" * 1_000_000 if mode == "big" else b"ok"
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        return Handler

    def up(self) -> Receiver:
        server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        server.daemon_threads = True
        self.server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def down(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def stop_hanging(self) -> None:
        self.release.set()

    def bodies(self, event: str | None = None) -> list[Received]:
        with self.lock:
            return [r for r in self.received if event is None or r.json["event"] == event]
