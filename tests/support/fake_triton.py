"""A stand-in for Triton's HTTP endpoint, on the standard library: each (method, path) gets the answer a test sets,
whole or chunked (generate_stream's server-sent events), and every request and connection is recorded."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    chunks: list[bytes] | None = None  # sent chunked, one write (and flush) each


def sse(*events: dict) -> list[bytes]:
    return [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]


@dataclass
class FakeTriton:
    url: str
    answers: dict[tuple[str, str], Answer]
    requests: list[tuple[str, str, bytes]] = field(default_factory=list)
    connections: list[int] = field(default_factory=list)  # one entry per connection accepted


@contextlib.contextmanager
def fake_triton() -> Iterator[FakeTriton]:
    answers: dict[tuple[str, str], Answer] = {}
    seen: list[tuple[str, str, bytes]] = []
    connections: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, and chunked answers

        def setup(self) -> None:
            super().setup()
            connections.append(1)

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            seen.append((self.command, self.path, body))
            answer = answers.get((self.command, self.path), Answer(404, b'{"error":"not found"}'))
            self.send_response(answer.status)
            if answer.chunks is None:
                self.send_header("Content-Length", str(len(answer.body)))
                self.end_headers()
                self.wfile.write(answer.body)
                return
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in answer.chunks:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")

        do_GET = do_POST = _answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield FakeTriton(f"http://127.0.0.1:{server.server_address[1]}", answers, seen, connections)
    finally:
        server.shutdown()
        server.server_close()
