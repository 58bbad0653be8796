"""A lean client for Triton's HTTP generate_stream endpoint, on asyncio streams only (no tritonclient, no aiohttp).

The load generator shares the machine's cores with the server in these benchmarks, so its own cost per response
matters: this one keeps one HTTP/1.1 keep-alive connection per worker and parses the server-sent events of the
chunked response itself. It also runs where tritonclient is not installed (the GPU device).
"""

from __future__ import annotations

import asyncio
import json
import time


class GenerateStreamError(RuntimeError):
    pass


class GenerateStreamConnection:
    """One keep-alive connection; requests on it run one after another."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> None:
        if self._writer is None or self._writer.is_closing():
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
            self._writer = None

    async def generate(self, model: str, body: dict, on_event=None) -> tuple[float, list[dict]]:
        """POST body to /v2/models/MODEL/generate_stream; returns (seconds to the first event, events)."""
        await self._connect()
        assert self._reader is not None and self._writer is not None
        payload = json.dumps(body).encode()
        head = (
            f"POST /v2/models/{model}/generate_stream HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
        ).encode()
        start = time.perf_counter()
        self._writer.write(head + payload)
        status = await self._reader.readline()
        if not status.startswith(b"HTTP/1.1 "):
            await self.close()
            raise GenerateStreamError(f"no HTTP response: {status!r}")
        code = int(status.split()[1])
        headers = {}
        while True:
            line = await self._reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() != "chunked":
            body_bytes = await self._reader.readexactly(int(headers.get("content-length", "0")))
            raise GenerateStreamError(f"HTTP {code}: {body_bytes.decode(errors='replace')}")
        first: float | None = None
        events: list[dict] = []
        pending = b""
        while True:
            size = int((await self._reader.readline()).split(b";")[0], 16)
            if size == 0:
                await self._reader.readline()  # the blank line after the last chunk
                break
            pending += await self._reader.readexactly(size)
            await self._reader.readexactly(2)
            while b"\n\n" in pending:
                event, pending = pending.split(b"\n\n", 1)
                if not event.startswith(b"data: "):
                    continue
                data = json.loads(event[6:])
                if first is None:
                    first = time.perf_counter() - start
                if "error" in data:
                    raise GenerateStreamError(str(data["error"]))
                events.append(data)
                if on_event is not None:
                    on_event(data)
        if code != 200:
            raise GenerateStreamError(f"HTTP {code}: {events}")
        return (first if first is not None else time.perf_counter() - start), events
