"""The gateway's stream socket: where a backend on the same host writes the bytes of streamed OpenAI responses.

Every Triton response a Python backend sends is a synchronous round trip from its stub to the server process (about
0.1 ms of the engine loop's time on a 2-core machine), and a streamed chat answer is one response per token: at a
hundred streams that round trip, not vLLM, is what the backend's process spends its time on. So when the gateway
and Triton share a host, each streamed request names this Unix socket and a stream id in its envelope
(``stream_to``). The backend then writes that stream's SSE bytes here as frames, and Triton still carries the request
itself: its admission to the model, cancellation, and the final response with the HTTP status. A backend that cannot
reach the socket (Triton in a container, on another host) answers through Triton as before; so does every response
that is not a streamed 200.

A frame is FRAME_HEADER (stream id, kind, payload length; little-endian) and the payload: START says vLLM has begun
a streamed 200 answer (the client gets its headers then, as from vllm serve, not with the first token), DATA carries
bytes to write to the client as they are, END says the stream's bytes are complete. The other way, the gateway
writes CANCEL to its backends when a stream's client goes away, as well as cancelling its Triton request: the
backend aborts it at once, without asking Triton about each request in flight. The socket first says
STREAM_SOCKET_HELLO on every connection, and a backend writes nothing to a socket that does not: a request cannot
point it at another program's socket. The backend writes and reads the same frames, in the format
of its contract.py, which this module imports.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
import shutil
import struct
import tempfile

from vllm_repo.backend.vllm_repo_backend import hops
from vllm_repo.backend.vllm_repo_backend.contract import (
    STREAM_FRAME_CANCEL,
    STREAM_FRAME_DATA,
    STREAM_FRAME_END,
    STREAM_FRAME_HEADER,
    STREAM_FRAME_START,
    STREAM_SOCKET_HELLO,
)

FRAME_HEADER = struct.Struct(STREAM_FRAME_HEADER)
# The hop benchmarks' timestamps (hops.py): with VLLM_REPO_TRACE_HOPS unset, one reference compared per site.
_hop, _no_hop = hops.hop, hops.off
# Cancelled stream ids told again to each backend that connects later: one whose request was already on its way.
RECENT_CANCELS_KEPT = 256


class StreamInbox:
    """One request's frames, in order, and what the request's Triton side reports (StreamSocket.open())."""

    def __init__(self, stream_id: int, owner: StreamSocket) -> None:
        self.id = stream_id
        self.queue: asyncio.Queue = asyncio.Queue()
        self._owner = owner

    @property
    def address(self) -> dict[str, object]:
        """The envelope's ``stream_to``."""
        return {"socket": self._owner.path, "id": self.id}

    def close(self) -> None:
        """No more frames wanted (the answer is complete, or the client went away): later ones are dropped."""
        self._owner.forget(self.id)

    def cancel(self) -> None:
        """The client went away before the answer was complete: its backend is told to abort the request."""
        self._owner.cancel(self.id)


class StreamSocket:
    """A Unix socket in a directory of its own (mode 0700: only this user's processes can connect), serving frames
    to the inbox of each open stream. Frames for a stream nobody waits for any more are read and dropped."""

    def __init__(self) -> None:
        self.path: str | None = None
        self._directory: str | None = None
        self._server: asyncio.AbstractServer | None = None
        self._inboxes: dict[int, StreamInbox] = {}
        self._ids = itertools.count(1)
        self._connections: dict[asyncio.Task, asyncio.StreamWriter] = {}
        self._recent_cancels: collections.deque[bytes] = collections.deque(maxlen=RECENT_CANCELS_KEPT)

    async def start(self) -> StreamSocket:
        self._directory = tempfile.mkdtemp(prefix="vllm-repo-openai-")
        self.path = os.path.join(self._directory, "streams.sock")
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=self.path)
        except BaseException:
            await self.close()
            raise
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            # Closing each connection ends its reader (at EOF), rather than cancelling it mid-read.
            for writer in list(self._connections.values()):
                writer.close()
            await asyncio.gather(*self._connections, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    def forget(self, stream_id: int) -> None:
        self._inboxes.pop(stream_id, None)

    def cancel(self, stream_id: int) -> None:
        """A CANCEL frame to every connected backend: stream ids are this socket's, so only the one serving the
        stream acts on it (or will, when its request reaches it)."""
        self.forget(stream_id)
        frame = FRAME_HEADER.pack(stream_id, STREAM_FRAME_CANCEL, 0)
        self._recent_cancels.append(frame)
        for writer in self._connections.values():
            if not writer.is_closing():
                writer.write(frame)

    def open(self) -> StreamInbox:
        inbox = StreamInbox(next(self._ids), self)
        self._inboxes[inbox.id] = inbox
        return inbox

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections[task] = writer
        try:
            writer.write(STREAM_SOCKET_HELLO + b"".join(self._recent_cancels))
            while True:
                stream_id, kind, size = FRAME_HEADER.unpack(await reader.readexactly(FRAME_HEADER.size))
                payload = await reader.readexactly(size) if size else b""
                if _hop is not _no_hop and kind == STREAM_FRAME_DATA:
                    _hop("GR", stream_id)
                inbox = self._inboxes.get(stream_id)
                if inbox is not None and kind in (STREAM_FRAME_START, STREAM_FRAME_DATA, STREAM_FRAME_END):
                    inbox.queue.put_nowait((kind, payload))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the backend closed its end: its model was unloaded, or its process ended
        finally:
            if task is not None:
                self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def encode_frame(stream_id: int, kind: int, payload: bytes = b"") -> bytes:
    """A frame as the backend writes it (for tests and stand-ins; the backend has its own copy)."""
    return FRAME_HEADER.pack(stream_id, kind, len(payload)) + payload
