"""The OpenAI wire: an OpenAI request as the ``openai_request`` input carries it, the error bodies the backend answers
itself, the joining of a response's SSE chunks into Triton responses, and the link to an OpenAI gateway's stream
socket, where a gateway on this host reads streamed responses' bytes as frames (vllm_repo.serve.openai.stream_socket
is its other end; contract.py has the frame format)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from . import log
from .contract import (
    OPENAI_ENDPOINTS,
    OPENAI_ID_ENDPOINTS,
    STREAM_FRAME_CANCEL,
    STREAM_FRAME_DATA,
    STREAM_FRAME_END,
    STREAM_FRAME_HEADER,
    STREAM_SOCKET_HELLO,
)
from .errors import did_you_mean

STREAM_FRAME = struct.Struct(STREAM_FRAME_HEADER)
# Stream ids a gateway cancelled before their request reached this backend, remembered for when it does.
STREAM_EARLY_CANCELS_KEPT = 1024
# How long a stream socket has to say its hello.
STREAM_SOCKET_HELLO_TIMEOUT_S = 5.0
# Bytes a stream socket may buffer before a stream waits for the gateway to read (vLLM's generator waits with it).
STREAM_SOCKET_HIGH_WATER = 4 * 2**20

# OPENAI_ID_ENDPOINTS' routes as patterns, ID any one path segment.
_OPENAI_ID_PATTERNS = [
    (re.compile(re.escape(route).replace(re.escape("{id}"), "[^/]+")), method)
    for route, method in OPENAI_ID_ENDPOINTS.items()
]


def openai_method(path: Any) -> str | None:
    """The HTTP method vLLM's router serves ``path`` with, or None for a path the backend does not serve."""
    if not isinstance(path, str):
        return None
    method = OPENAI_ENDPOINTS.get(path)
    if method is None:
        method = next((m for pattern, m in _OPENAI_ID_PATTERNS if pattern.fullmatch(path)), None)
    return method


class OpenAIError(Exception):
    """An OpenAI request answered with an error status and vLLM's error body shape."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.err_type = err_type
        self.param = param

    def body(self) -> bytes:
        return openai_error_body(str(self), self.status, self.err_type, self.param)


def openai_json(content: Any) -> bytes:
    """JSON as vLLM's server writes it (Starlette's JSONResponse: compact, UTF-8, no NaN)."""
    return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()


def openai_error_body(message: str, status: int, err_type: str, param: str | None = None) -> bytes:
    """vLLM's ErrorResponse ({"error": {message, type, param, code}}), for answers the backend gives itself."""
    return openai_json({"error": {"message": message, "type": err_type, "param": param, "code": status}})


@dataclasses.dataclass(frozen=True)
class StreamTo:
    """Where a gateway on this host reads a streamed response's bytes: its Unix socket, and the stream's id there."""

    socket: str
    id: int


def parse_stream_to(value: Any) -> StreamTo | None:
    if value is None:
        return None
    if (
        not isinstance(value, dict)
        or set(value) != {"socket", "id"}
        or not isinstance(value["socket"], str)
        or not value["socket"]
        or not isinstance(value["id"], int)
        or isinstance(value["id"], bool)
        or not 0 <= value["id"] < 2**64
    ):
        raise OpenAIError(
            400, f'openai_request: stream_to must be {{"socket": PATH, "id": N}} (N >= 0), got {json.dumps(value)[:80]}'
        )
    return StreamTo(value["socket"], value["id"])


class OpenAIEnvelope(NamedTuple):
    """One OpenAI request as the ``openai_request`` input carries it."""

    endpoint: str
    method: str
    body: bytes
    stream_to: StreamTo | None = None
    # The client's headers for vLLM's app, as ASGI gives them; None from a sender that passes on none.
    headers: list[tuple[bytes, bytes]] | None = None
    # The URL's query string (after "?" in the envelope's endpoint), as ASGI gives it.
    query: bytes = b""


def parse_headers(value: Any) -> list[tuple[bytes, bytes]] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(part, str) for part in pair) and pair[0]
        for pair in value
    ):
        raise OpenAIError(
            400, f'openai_request: headers must be [["name", "value"], ...], got {json.dumps(value)[:80]}'
        )
    # surrogateescape: the bytes the client sent, where the gateway decoded a header that was not UTF-8 that way.
    return [
        (name.lower().encode("utf-8", "surrogateescape"), text.encode("utf-8", "surrogateescape"))
        for name, text in value
    ]


def parse_openai_request(raw: Any) -> OpenAIEnvelope:
    """The request in the ``openai_request`` input. The body is the client's JSON object (re-encoded for vLLM's
    router) or a string of the raw body, which a gateway passes on as it came (vLLM then parses exactly what the
    client sent, and answers bad JSON as it does). Raises OpenAIError (400) for a malformed envelope."""
    if isinstance(raw, (bytes, np.bytes_)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise OpenAIError(400, "openai_request is not valid UTF-8") from None
    if not isinstance(raw, str):
        raise OpenAIError(400, f"openai_request must be a JSON string, got {type(raw).__name__}")
    try:
        envelope = json.loads(raw)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise OpenAIError(400, f"openai_request is not valid JSON: {exc.msg} at {where}") from None
    if not isinstance(envelope, dict):
        raise OpenAIError(400, f'openai_request must be a JSON object {{"endpoint": ..., "body": ...}}, got {raw[:80]}')
    keys = ("endpoint", "body", "stream_to", "headers")
    unknown = sorted(set(envelope) - set(keys))
    if unknown:
        raise OpenAIError(400, f'openai_request: unknown key "{unknown[0]}"{did_you_mean(unknown[0], keys)}')
    endpoint = envelope.get("endpoint")
    method = None  # an endpoint that is no string is served by no method either
    if isinstance(endpoint, str):
        path, _, query = endpoint.partition("?")
        method = openai_method(path)
    if method is None:
        raise OpenAIError(
            404,
            f"openai_request: endpoint {json.dumps(endpoint)} is not served; the backend serves "
            + ", ".join([*OPENAI_ENDPOINTS, *OPENAI_ID_ENDPOINTS]),
            "NotFoundError",
        )
    body = envelope.get("body")
    if method == "GET" or body is None:
        data = b""
    elif isinstance(body, str):
        data = body.encode("utf-8")
    else:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    return OpenAIEnvelope(
        path,
        method,
        data,
        parse_stream_to(envelope.get("stream_to")),
        parse_headers(envelope.get("headers")),
        query.encode("utf-8"),
    )


def failed_stream_tail(endpoint: str, message: str) -> bytes:
    """What ends a stream whose answer failed after it began, as vLLM's own generators end one: for the Anthropic
    Messages API an ``error`` event (its clients read no other), otherwise an error object and [DONE]."""
    if endpoint.startswith("/v1/messages"):
        error = {"type": "error", "error": {"type": "internal_error", "message": message}}
        return b"event: error\ndata: " + openai_json(error) + b"\n\n"
    return b"data: " + openai_error_body(message, 500, "InternalServerError") + b"\n\ndata: [DONE]\n\n"


def stream_frames(stream_id: int, data: bytes, last: bool) -> bytes:
    """A DATA frame of ``data`` (none when it is empty), and the END frame when ``last``."""
    frames = STREAM_FRAME.pack(stream_id, STREAM_FRAME_DATA, len(data)) + data if data else b""
    if last:
        frames += STREAM_FRAME.pack(stream_id, STREAM_FRAME_END, 0)
    return frames


def asgi_scope(method: str, path: str, query: bytes, headers: list[tuple[bytes, bytes]] | None, body: bytes) -> dict:
    """The ASGI scope vLLM's app gets for the request: the client's headers (Content-Type JSON where a sender passed on
    none), and the length of the body the backend passes on."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [
            *(headers if headers is not None else [(b"content-type", b"application/json")]),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("triton", 0),
        "server": ("triton", 0),
        "state": {},
    }


class StreamLink:
    """One connection to a gateway's stream socket. The frames written in one pass of the engine loop go out in one
    write after it: an engine step wakes every running stream at once, and their chunks then cost the loop one system
    call, not one each.

    The gateway's CANCEL frames come back on it: a request attached here is cancelled through ``on_cancel(job,
    reason)`` when its client goes away, or when the gateway itself does (the connection ends), with no
    ``is_cancelled()`` round trip to the server for it."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        loop: asyncio.AbstractEventLoop,
        on_cancel: Callable[[Any, str], None],
    ) -> None:
        self.writer = writer
        self._loop = loop
        self._pending = bytearray()
        self._scheduled = False
        self._on_cancel = on_cancel
        self._attached: dict[int, Any] = {}
        self._cancelled_early: dict[int, None] = {}  # insertion-ordered: the oldest go first
        self.reading = loop.create_task(self._read(reader))

    def attach(self, stream_id: int, job: Any) -> None:
        """``job`` serves ``stream_id``: the gateway's cancellation reaches it from now (or now, if it came first)."""
        if stream_id in self._cancelled_early:
            del self._cancelled_early[stream_id]
            self._on_cancel(job, "request was cancelled")
        elif self.closed:
            self._on_cancel(job, "the OpenAI gateway's stream socket closed")
        else:
            self._attached[stream_id] = job

    def detach(self, stream_id: int) -> None:
        self._attached.pop(stream_id, None)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                stream_id, kind, size = STREAM_FRAME.unpack(await reader.readexactly(STREAM_FRAME.size))
                if size:
                    await reader.readexactly(size)
                if kind != STREAM_FRAME_CANCEL:
                    continue
                job = self._attached.pop(stream_id, None)
                if job is not None:
                    self._on_cancel(job, "request was cancelled")
                else:
                    self._cancelled_early[stream_id] = None
                    if len(self._cancelled_early) > STREAM_EARLY_CANCELS_KEPT:
                        del self._cancelled_early[next(iter(self._cancelled_early))]
        except (asyncio.IncompleteReadError, OSError):
            pass  # the gateway closed its socket, or went away
        finally:
            self.writer.close()
            attached, self._attached = self._attached, {}
            for job in attached.values():
                self._on_cancel(job, "the OpenAI gateway's stream socket closed")

    @property
    def closed(self) -> bool:
        return self.writer.is_closing()

    def send(self, frame: bytes) -> None:
        self._pending += frame
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if self._pending and not self.writer.is_closing():
            self.writer.write(bytes(self._pending))
        self._pending.clear()

    def buffered(self) -> int:
        """Bytes written but not yet taken by the gateway."""
        return len(self._pending) + self.writer.transport.get_write_buffer_size()

    async def drain(self) -> None:
        self.flush()
        await self.writer.drain()


async def connect_stream_link(path: str, on_cancel: Callable[[Any, str], None]) -> StreamLink | None:
    """A connection to the gateway whose stream socket is ``path``, or None when it cannot be reached or is not a
    gateway's (that gateway then gets its bytes through Triton); the reason goes to the log."""
    try:
        reader, writer = await asyncio.open_unix_connection(path)
    except (OSError, ValueError) as exc:
        why = getattr(exc, "strerror", None) or exc
        log.warn(
            f"[vllm] the OpenAI gateway's stream socket {path} cannot be reached ({why}): its streamed responses "
            "go through Triton (the gateway is on another host or in another container)",
        )
        return None
    try:
        hello = await asyncio.wait_for(reader.readexactly(len(STREAM_SOCKET_HELLO)), STREAM_SOCKET_HELLO_TIMEOUT_S)
    except (asyncio.TimeoutError, asyncio.IncompleteReadError, OSError):
        hello = b""
    if hello != STREAM_SOCKET_HELLO:
        writer.close()
        log.warn(f"[vllm] {path} is not an OpenAI gateway's stream socket: its responses go through Triton")
        return None
    log.info(f"[vllm] streamed OpenAI responses go to the gateway's socket {path}")
    return StreamLink(reader, writer, asyncio.get_running_loop(), on_cancel)


class SseJoiner:
    """The bytes of one OpenAI response waiting to go out, with at most one Triton response in flight.

    Each Triton response is a round trip to the server. While one is in flight, the chunks vLLM's generator yields
    queue up and go out joined in the next response (concatenated SSE events are still valid SSE): a stream keeps
    pace with the engine however fast it produces. The final flag goes with the last bytes, or alone (an empty body)
    when the last chunk was already in flight as the stream ended.
    """

    def __init__(self) -> None:
        self.pending: list[bytes] = []
        self.in_flight = False
        self.done = False
        self.final_taken = False

    def push(self, chunk: bytes) -> None:
        if chunk:
            self.pending.append(bytes(chunk))

    def finish(self) -> None:
        self.done = True

    def take(self) -> tuple[bytes, bool] | None:
        """(bytes, final) to send now, or None: a send is in flight, nothing is pending, or the final went."""
        if self.in_flight or self.final_taken or not (self.pending or self.done):
            return None
        data = b"".join(self.pending)
        self.pending.clear()
        self.in_flight = True
        self.final_taken = self.done
        return data, self.final_taken

    def sent(self) -> None:
        self.in_flight = False
