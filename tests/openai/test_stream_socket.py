"""The stream socket: a backend on the gateway's host writes a streamed answer's bytes there, Triton carries the rest.

The gateway side is the real aiohttp application and a real Unix socket; the Triton side is a stand-in that, like the
bundled backend, connects to the socket named in the request and writes frames. The backend's own side (its hello
check, and the backend's frames through real Triton and vLLM) is tested here and in tests/openai/test_gateway_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import types

import pytest
from aiohttp.test_utils import TestClient, TestServer

from vllm_repo.backend import model as backend
from vllm_repo.backend.vllm_repo_backend import contract, jobs, openai_serving, openai_wire, sends, stub
from vllm_repo.serve.openai import app as gateway_app
from vllm_repo.serve.openai.app import OpenAIGateway
from vllm_repo.serve.openai.gateway import StreamSocketMode, offers_stream_socket, open_stream_socket
from vllm_repo.serve.openai.stream_socket import StreamSocket, encode_frame
from vllm_repo.serve.openai.triton import Chunk, TritonUnavailable

DATA, END, START = contract.STREAM_FRAME_DATA, contract.STREAM_FRAME_END, contract.STREAM_FRAME_START
WAIT = "wait"  # in LocalBackend's frames: (WAIT, event) holds the frames after it until the event is set
FINAL_WITHOUT_BYTES = Chunk(200, b"", True)  # the backend's Triton side of an answer that took the socket


class LocalBackend:
    """Triton with a backend on this host: streamed answers go to the socket the request names, as ``frames``; the
    Triton side yields ``triton`` (its final response last). ``final_first`` sends the final before the frames."""

    def __init__(self, frames=(), triton=(FINAL_WITHOUT_BYTES,), final_first=False, hold=False, end_after_final=0.0):
        self.frames = list(frames)
        self.triton = list(triton)
        self.final_first = final_first
        self.hold = hold  # keep the request open after the frames until the gateway's CANCEL frame, then end it
        self.end_after_final = end_after_final  # how long the call takes to end after its final response
        self.stream_to: dict | None = None
        self.cancelled = asyncio.Event()  # the gateway cancelled the call (gave up on it) rather than let it end
        self.ended = asyncio.Event()  # the call ended by itself
        self.shared: list[bool] = []  # per request: whether the gateway sent it on its shared Triton stream
        self.from_gateway: list[tuple[int, int, int]] = []  # frame headers the gateway wrote to this backend
        self.frame_from_gateway = asyncio.Event()

    async def server_ready(self):
        return True

    async def openai_models(self):
        return ["tiny"]

    async def close(self):
        pass

    async def _write_frames(self, stream_to):
        reader, writer = await asyncio.open_unix_connection(stream_to["socket"])
        assert await reader.readexactly(len(contract.STREAM_SOCKET_HELLO)) == contract.STREAM_SOCKET_HELLO
        if self.hold:  # serving the stream until cancelled: listens to the gateway, as the backend does
            self._listening = asyncio.ensure_future(self._listen(reader, writer))
        for kind, payload in self.frames:
            if kind == WAIT:
                await payload.wait()
                continue
            writer.write(encode_frame(stream_to["id"], kind, payload))
            await writer.drain()
            await asyncio.sleep(0.01)
        if not self.hold:
            writer.close()

    async def _listen(self, reader, writer):
        header = openai_wire.STREAM_FRAME
        try:
            while True:
                self.from_gateway.append(header.unpack(await reader.readexactly(header.size)))
                self.frame_from_gateway.set()
        except asyncio.IncompleteReadError:
            writer.close()

    async def call(self, model, endpoint, body=None, stream_to=None, shared=False, headers=None):
        if endpoint == "/v1/models":
            yield Chunk(200, json.dumps({"object": "list", "data": [{"id": model}]}).encode(), True)
            return
        self.stream_to = stream_to
        self.shared.append(shared)
        try:
            if self.frames and not self.final_first:
                await self._write_frames(stream_to)
            if self.hold:  # the bundled backend ends a request the gateway cancels over the socket at once
                await asyncio.wait_for(self.frame_from_gateway.wait(), 30)
            for chunk in self.triton:
                yield chunk
            await asyncio.sleep(self.end_after_final)
            self.ended.set()
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled.set()
            raise
        if self.frames and self.final_first:
            # Held here: the loop keeps only a weak reference to a task, and a collection could end it mid-write.
            self._late_writes = []
            asyncio.get_running_loop().call_later(
                0.05, lambda: self._late_writes.append(asyncio.ensure_future(self._write_frames(stream_to)))
            )


async def _client(triton) -> tuple[TestClient, StreamSocket]:
    streams = await StreamSocket().start()
    client = TestClient(TestServer(OpenAIGateway(triton, streams=streams).application()))
    await client.start_server()
    return client, streams


async def _stop(client, streams):
    await client.close()
    await streams.close()


STREAM = {"model": "tiny", "stream": True}
SSE = [(DATA, b"data: 1\n\n"), (DATA, b"data: 2\n\n"), (DATA, b"data: [DONE]\n\n"), (END, b"")]


@pytest.mark.parametrize("final_first", [False, True], ids=["frames-first", "triton-final-first"])
def test_a_streamed_answer_comes_whole_and_in_order_from_the_socket(final_first):
    async def scenario():
        triton = LocalBackend(frames=SSE, final_first=final_first)
        client, streams = await _client(triton)
        try:
            response = await client.post("/v1/chat/completions", json=STREAM)
            assert (response.status, response.content_type) == (200, "text/event-stream")
            assert await response.read() == b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
            assert triton.stream_to["socket"] == streams.path
            assert os.stat(os.path.dirname(streams.path)).st_mode & 0o777 == 0o700
        finally:
            await _stop(client, streams)

    asyncio.run(scenario())


def test_a_backend_that_cannot_reach_the_socket_answers_through_triton():
    chunks = (Chunk(200, b"data: 1\n\n", False), Chunk(200, b"data: [DONE]\n\n", True))

    async def scenario():
        triton = LocalBackend(triton=chunks)
        client, streams = await _client(triton)
        try:
            response = await client.post("/v1/chat/completions", json=STREAM)
            assert await response.read() == b"data: 1\n\ndata: [DONE]\n\n"
            assert triton.stream_to is not None  # offered, not taken
        finally:
            await _stop(client, streams)

    asyncio.run(scenario())


def test_answers_that_are_not_streamed_name_the_socket_only_to_a_backend_known_to_read_it_and_share_its_stream():
    async def scenario():
        answer = Chunk(200, b'{"id": 1}', True)
        triton = LocalBackend(triton=(answer,))
        client, streams = await _client(triton)
        try:
            response = await client.post("/v1/completions", json={"model": "tiny", "prompt": "x"})
            assert await response.json() == {"id": 1}
            assert triton.stream_to is None and triton.shared == [False]
            # A streamed answer that took the socket shows that this backend reads it (and its CANCEL frames).
            triton.frames, triton.triton = SSE, [FINAL_WITHOUT_BYTES]
            response = await client.post("/v1/chat/completions", json=STREAM)
            assert await response.read() == b"".join(payload for _, payload in SSE)
            # From then on a request whose answer comes through Triton names the socket too, for cancellation
            # alone, on the shared stream; its answer is whole, and the backend stays a reader of the socket.
            triton.frames, triton.triton = [], [answer]
            for _ in range(2):
                response = await client.post("/v1/completions", json={"model": "tiny", "prompt": "x"})
                assert await response.json() == {"id": 1}
                assert triton.stream_to is not None
            assert triton.shared == [False, False, True, True]
        finally:
            await _stop(client, streams)

    asyncio.run(scenario())


def test_a_client_that_leaves_before_an_answer_not_streamed_cancels_it_over_the_socket_not_its_triton_call():
    async def scenario():
        triton = LocalBackend(frames=SSE)
        client, streams = await _client(triton)
        try:
            response = await client.post("/v1/chat/completions", json=STREAM)
            assert await response.read() == b"".join(payload for _, payload in SSE)
            reader, writer = await asyncio.open_unix_connection(streams.path)  # the backend, listening
            assert await reader.readexactly(len(contract.STREAM_SOCKET_HELLO)) == contract.STREAM_SOCKET_HELLO
            triton.frames, triton.hold, triton.triton = [], True, [Chunk(200, b'{"id": 1}', True)]
            asking = asyncio.ensure_future(client.post("/v1/completions", json={"model": "tiny", "prompt": "x"}))
            while len(triton.shared) < 2:
                await asyncio.sleep(0.01)
            asking.cancel()
            await asyncio.gather(asking, return_exceptions=True)
            header = openai_wire.STREAM_FRAME
            frame = await asyncio.wait_for(reader.readexactly(header.size), 5)
            assert header.unpack(frame) == (triton.stream_to["id"], contract.STREAM_FRAME_CANCEL, 0)
            # It went on the shared stream, where the gateway's giving up only stops listening: no call is cancelled.
            assert triton.shared == [False, True]
            writer.close()
        finally:
            await _stop(client, streams)

    asyncio.run(scenario())


def test_bytes_that_never_reach_the_socket_end_the_stream_with_an_error_event(monkeypatch):
    monkeypatch.setattr(gateway_app, "STREAM_SOCKET_GRACE_S", 0.2)

    async def scenario():
        # Triton says the request is done, with no bytes of its own, and the socket stays silent.
        client, streams = await _client(LocalBackend(frames=[(DATA, b"data: 1\n\n")]))
        try:
            response = await client.post("/v1/chat/completions", json=STREAM)
            events = (await response.read()).decode().split("\n\n")
            assert events[0] == "data: 1"
            message = json.loads(events[1].removeprefix("data: "))["error"]["message"]
            assert "did not reach the gateway's socket" in message
            assert events[2] == "data: [DONE]"
        finally:
            await _stop(client, streams)

    asyncio.run(scenario())


def test_a_triton_error_mid_stream_ends_a_socket_stream_with_an_error_event():
    async def scenario():
        triton = LocalBackend(frames=SSE[:1])

        async def failing_call(model, endpoint, body=None, stream_to=None, shared=False, headers=None):
            if endpoint == "/v1/models":
                yield Chunk(200, b'{"data": [{"id": "tiny"}]}', True)
                return
            await triton._write_frames(stream_to)
            await asyncio.sleep(0.05)
            raise TritonUnavailable("the model is being unloaded")
            yield  # an async generator, as the real call is

        triton.call = failing_call
        client, streams = await _client(triton)
        try:
            response = await client.post("/v1/chat/completions", json=STREAM)
            events = (await response.read()).decode().split("\n\n")
            assert events[0] == "data: 1"
            assert json.loads(events[1].removeprefix("data: "))["error"]["message"] == "the model is being unloaded"
        finally:
            await _stop(client, streams)

    asyncio.run(scenario())


def test_a_client_that_goes_away_cancels_its_stream_over_the_socket_and_the_backend_ends_its_triton_call():
    async def scenario():
        triton = LocalBackend(frames=SSE[:1], hold=True)
        client, streams = await _client(triton)
        try:
            response = await client.post("/v1/chat/completions", json=STREAM)
            assert await response.content.readuntil(b"\n\n") == b"data: 1\n\n"
            assert not triton.from_gateway  # nothing but the hello while the client reads
            response.close()
            await asyncio.wait_for(triton.frame_from_gateway.wait(), 5)
            assert triton.from_gateway == [(triton.stream_to["id"], contract.STREAM_FRAME_CANCEL, 0)]
            assert not streams._inboxes  # later frames of that stream are dropped
            # Told over the socket, the backend ends the request; its gRPC call is not cancelled under it (a call
            # cancelled while Triton 2.51 completes it can crash the server).
            await asyncio.wait_for(triton.ended.wait(), 5)
            assert not triton.cancelled.is_set()
        finally:
            await _stop(client, streams)

    asyncio.run(scenario())


def test_a_client_gone_when_its_next_chunk_is_written_is_cancelled_and_no_error_is_logged(caplog, monkeypatch):
    """aiohttp raises ConnectionResetError on a write to a client that went away, often before it cancels the
    handler: that is the client leaving, not a gateway error (uvicorn logs none for vllm serve). The backend is told,
    and nothing is logged."""
    writes = []

    async def write_to_a_gone_client(relay, data):
        writes.append(data)
        if len(writes) > 1:
            raise ConnectionResetError("Cannot write to closing transport")
        await (await relay._stream()).write(data)

    monkeypatch.setattr(gateway_app.Relay, "from_socket", write_to_a_gone_client)

    async def scenario():
        triton = LocalBackend(frames=SSE, hold=True)
        client, streams = await _client(triton)
        try:
            response = await client.post("/v1/chat/completions", json=STREAM)
            await response.read()
            await asyncio.wait_for(triton.frame_from_gateway.wait(), 5)
            assert triton.from_gateway == [(triton.stream_to["id"], contract.STREAM_FRAME_CANCEL, 0)]
            await asyncio.wait_for(triton.ended.wait(), 5)  # the backend ended it: its call was not cancelled
        finally:
            await _stop(client, streams)

    with caplog.at_level("ERROR"):
        asyncio.run(scenario())
    assert len(writes) == 2
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


def test_a_client_that_goes_away_before_the_backend_wrote_to_the_socket_has_its_triton_call_cancelled():
    async def scenario():
        held = asyncio.Event()
        triton = LocalBackend(frames=[(WAIT, held), *SSE])
        client, streams = await _client(triton)
        try:
            asking = asyncio.ensure_future(client.post("/v1/chat/completions", json=STREAM))
            while triton.stream_to is None:
                await asyncio.sleep(0.01)
            asking.cancel()  # the client leaves before any header: nothing shows that this backend reads CANCEL
            await asyncio.gather(asking, return_exceptions=True)
            await asyncio.wait_for(triton.cancelled.wait(), 5)
            assert not triton.ended.is_set()
        finally:
            held.set()
            await _stop(client, streams)

    asyncio.run(scenario())


def test_a_call_that_had_its_final_response_is_left_to_end_and_the_client_is_not_held_for_it():
    async def scenario():
        triton = LocalBackend(frames=SSE, end_after_final=0.5)
        client, streams = await _client(triton)
        try:
            response = await client.post("/v1/chat/completions", json=STREAM)
            assert await response.read() == b"".join(payload for _, payload in SSE)
            assert not triton.ended.is_set()  # the answer was complete before the call's end
            await asyncio.wait_for(triton.ended.wait(), 5)
            assert not triton.cancelled.is_set()
        finally:
            await _stop(client, streams)

    asyncio.run(scenario())


def test_a_call_still_ending_when_the_gateway_stops_is_cancelled_then():
    async def scenario():
        triton = LocalBackend(frames=SSE, end_after_final=60)
        client, streams = await _client(triton)
        try:
            response = await client.post("/v1/chat/completions", json=STREAM)
            assert await response.read() == b"".join(payload for _, payload in SSE)
        finally:
            await asyncio.wait_for(_stop(client, streams), 5)
        assert triton.cancelled.is_set() and not triton.ended.is_set()

    asyncio.run(scenario())


def test_once_a_models_backend_wrote_to_the_socket_its_streams_share_tritons_stream_until_it_answers_through_triton():
    async def scenario():
        triton = LocalBackend(frames=SSE)
        client, streams = await _client(triton)
        try:
            for _ in range(2):
                response = await client.post("/v1/chat/completions", json=STREAM)
                assert await response.read() == b"".join(payload for _, payload in SSE)
            # Not answered through the socket: the bytes come through Triton.
            triton.frames, triton.triton = [], [Chunk(200, b"data: 1\n\ndata: [DONE]\n\n", True)]
            for _ in range(2):
                response = await client.post("/v1/chat/completions", json=STREAM)
                assert await response.read() == b"data: 1\n\ndata: [DONE]\n\n"
            non_streamed = await client.post("/v1/chat/completions", json={"model": "tiny"})
            assert non_streamed.status == 200
        finally:
            await _stop(client, streams)
        # Only a stream whose backend is known to read the socket's CANCEL frames goes on the shared stream.
        assert triton.shared == [False, True, True, False, False]

    asyncio.run(scenario())


def test_a_bug_on_the_triton_side_of_a_socket_stream_is_a_500_not_a_hang():
    async def scenario():
        triton = LocalBackend(frames=SSE)

        async def broken_call(model, endpoint, body=None, stream_to=None, shared=False, headers=None):
            raise RuntimeError("a bug")
            yield  # an async generator, as the client's call is

        triton.call = broken_call
        client, streams = await _client(triton)
        try:
            response = await asyncio.wait_for(client.post("/v1/chat/completions", json=STREAM), 5)
            assert response.status == 500
        finally:
            await _stop(client, streams)

    asyncio.run(scenario())


def test_a_backend_that_connects_after_a_cancel_is_told_of_it():
    async def scenario():
        streams = await StreamSocket().start()
        try:
            cancelled = streams.open()
            cancelled.cancel()  # no backend connected yet: the request may still be on its way to one
            reader, writer = await asyncio.open_unix_connection(streams.path)
            assert await reader.readexactly(len(contract.STREAM_SOCKET_HELLO)) == contract.STREAM_SOCKET_HELLO
            header = openai_wire.STREAM_FRAME
            frame = await asyncio.wait_for(reader.readexactly(header.size), 5)
            assert header.unpack(frame) == (cancelled.id, contract.STREAM_FRAME_CANCEL, 0)
            writer.close()
        finally:
            await streams.close()

    asyncio.run(scenario())


def test_a_complete_answer_sends_the_backend_no_cancel():
    async def scenario():
        triton = LocalBackend(frames=SSE, hold=False)
        client, streams = await _client(triton)
        reader, writer = await asyncio.open_unix_connection(streams.path)  # a second backend, listening
        try:
            assert await reader.readexactly(len(contract.STREAM_SOCKET_HELLO)) == contract.STREAM_SOCKET_HELLO
            response = await client.post("/v1/chat/completions", json=STREAM)
            assert await response.read() == b"".join(payload for _, payload in SSE)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(reader.readexactly(1), 0.2)
        finally:
            writer.close()
            await _stop(client, streams)

    asyncio.run(scenario())


def test_closing_the_socket_ends_its_connections_and_removes_its_directory(caplog):
    async def scenario():
        streams = await StreamSocket().start()
        directory = os.path.dirname(streams.path)
        reader, writer = await asyncio.open_unix_connection(streams.path)
        assert await reader.readexactly(len(contract.STREAM_SOCKET_HELLO)) == contract.STREAM_SOCKET_HELLO
        await streams.close()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # the backend's end sees EOF
        writer.close()
        assert not os.path.exists(directory)

    with caplog.at_level("ERROR", logger="asyncio"):
        asyncio.run(scenario())
    assert not caplog.records  # no task was cancelled mid-read


# --- the backend's side: it writes only to a socket that says the gateway's hello -------------------------------------


def _model() -> backend.TritonPythonModel:
    return backend.TritonPythonModel.__new__(backend.TritonPythonModel)


def test_the_backend_connects_to_a_gateways_socket():
    async def scenario():
        streams = await StreamSocket().start()
        try:
            link = await openai_wire.connect_stream_link(streams.path, lambda job, reason: None)
            assert link is not None
            first, second = streams.open(), streams.open()
            for inbox, payload in ((first, b"abc"), (second, b"de"), (first, b"f")):
                link.send(openai_wire.STREAM_FRAME.pack(inbox.id, contract.STREAM_FRAME_DATA, len(payload)) + payload)
            assert link.buffered() > 0  # held until the loop's pass ends, then written at once
            assert await asyncio.wait_for(first.queue.get(), 5) == (DATA, b"abc")
            assert await asyncio.wait_for(second.queue.get(), 5) == (DATA, b"de")
            assert await asyncio.wait_for(first.queue.get(), 5) == (DATA, b"f")
            link.writer.close()
        finally:
            await streams.close()

    asyncio.run(scenario())


def test_the_backend_cancels_a_stream_the_gateway_cancels_whenever_its_cancel_comes():
    cancelled: list[tuple[str, str]] = []

    async def scenario():
        streams = await StreamSocket().start()
        try:
            link = await openai_wire.connect_stream_link(
                streams.path, lambda job, reason: cancelled.append((job, reason))
            )
            first, second, early, detached = (streams.open() for _ in range(4))
            link.attach(first.id, "first")
            link.attach(second.id, "second")
            link.attach(detached.id, "detached")
            link.detach(detached.id)  # its request ended

            first.cancel()
            early.cancel()  # before the backend has its request
            detached.cancel()
            await asyncio.sleep(0.1)
            assert cancelled == [("first", "request was cancelled")]
            link.attach(early.id, "early")  # its request arrives: cancelled at once
            assert cancelled[-1] == ("early", "request was cancelled")

            await streams.close()  # the gateway goes away: what it still serves is cancelled too
            await asyncio.wait_for(link.reading, 5)
            assert cancelled[-1] == ("second", "the OpenAI gateway's stream socket closed")
            assert link.closed
            link.attach(streams.open().id, "late")  # a request that comes after
            assert cancelled[-1] == ("late", "the OpenAI gateway's stream socket closed")
        finally:
            await streams.close()

    asyncio.run(scenario())
    assert [job for job, _ in cancelled] == ["first", "early", "second", "late"]


def test_the_watcher_asks_triton_only_about_requests_no_gateway_link_watches():
    asked: list[str] = []

    class Sender:
        def __init__(self, name):
            self.name = name

        def is_cancelled(self):
            asked.append(self.name)
            return False

    model = _model()
    model._live = {
        "native": jobs.Job(None, Sender("native"), "native", {}, None, None, None),
        "openai": jobs.OpenAIJob(Sender("openai"), "openai", "/v1/completions", "POST", b"{}"),
        "linked": jobs.OpenAIJob(Sender("linked"), "linked", "/v1/completions", "POST", b"{}", watched_by_link=True),
    }
    model._dead_reason, model._closing = None, False
    model.engine = types.SimpleNamespace(errored=False)
    model._sweep()
    assert asked == ["native", "openai"]


def test_the_backend_writes_nothing_to_a_socket_that_is_not_a_gateways(tmp_path, monkeypatch):
    monkeypatch.setattr(openai_wire, "STREAM_SOCKET_HELLO_TIMEOUT_S", 0.2)
    received: list[bytes] = []

    async def scenario():
        async def other_program(reader, writer):  # e.g. an HTTP daemon: waits for its client to speak first
            received.append(await reader.read(100))
            writer.close()

        path = str(tmp_path / "other.sock")
        server = await asyncio.start_unix_server(other_program, path=path)
        try:
            ignore = lambda job, reason: None  # noqa: E731
            assert await openai_wire.connect_stream_link(str(tmp_path / "missing.sock"), ignore) is None
            assert await openai_wire.connect_stream_link(path, ignore) is None
            await asyncio.sleep(0.05)
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())
    assert received == [b""]  # connected, then closed without a byte


@pytest.mark.parametrize(
    "mode, address, offered",
    [
        (StreamSocketMode.AUTO, "127.0.0.1:8001", True),
        (StreamSocketMode.AUTO, "localhost:8001", True),
        (StreamSocketMode.AUTO, "[::1]:8001", True),
        (StreamSocketMode.AUTO, "10.1.2.3:8001", False),
        (StreamSocketMode.AUTO, "triton.internal:8001", False),
        (StreamSocketMode.ON, "10.1.2.3:8001", True),
        (StreamSocketMode.OFF, "127.0.0.1:8001", False),
    ],
)
def test_the_socket_is_offered_to_a_triton_on_this_host(mode, address, offered):
    assert offers_stream_socket(mode, address) is offered


def test_an_unknown_stream_socket_mode_is_a_usage_error_naming_the_choices():
    done = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "openai", "--stream-socket", "sometimes"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--stream-socket 'sometimes'" in done.stderr and "hint: give auto, on or off" in done.stderr


def test_without_a_usable_temporary_directory_the_gateway_goes_without_the_socket(tmp_path, monkeypatch, capsys):
    deep = tmp_path / ("d" * 120)  # past the length of a Unix socket's path
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    assert asyncio.run(open_stream_socket(StreamSocketMode.ON, "127.0.0.1:8001")) is None
    assert "streamed answers go through Triton" in capsys.readouterr().err
    assert list(deep.iterdir()) == []  # the directory made for it is gone again


async def _serve_with_app(
    streams, app, monkeypatch, errors=None, sent=None, use_socket=True, headers=None, endpoint="/v1/chat/completions"
):
    """The backend's OpenAI serving on one streamed request, with ``app`` in place of vLLM's; the request's inbox on
    the gateway's socket, and the final responses handed to the final-sends thread. Errors the backend logs go to
    ``errors`` (none are expected without it), the responses it sends before the final to ``sent``; without
    ``use_socket`` the request names no stream socket, as from a gateway on another host."""

    def unexpected(message):
        raise AssertionError(message)

    logger = types.SimpleNamespace(
        log_info=lambda message: None,
        log_warn=unexpected,
        log_error=unexpected if errors is None else errors.append,
    )
    monkeypatch.setattr(stub, "pb_utils", types.SimpleNamespace(TRITONSERVER_RESPONSE_COMPLETE_FINAL=1, Logger=logger))
    model = _model()
    model._loop = asyncio.get_running_loop()
    model._live = {}
    finals: list = []
    model._sends = types.SimpleNamespace(submit=finals.append)
    monkeypatch.setattr(sends, "openai_response", lambda status, data: (status, data))
    model._openai = openai_serving.OpenAIServing("tiny", "", None, None, None, model._pump_openai)
    model._openai.start(model._loop, None)

    async def openai_app():
        return app

    model._openai.app = openai_app
    inbox = streams.open()
    job = jobs.OpenAIJob(
        types.SimpleNamespace(send=lambda response, flags: (sent if sent is not None else []).append(response)),
        "r1",
        endpoint,
        "POST",
        b"{}",
        stream_to=openai_wire.StreamTo(streams.path, inbox.id) if use_socket else None,
        headers=headers,
    )
    job.task = asyncio.ensure_future(model._serve_openai(job))
    return inbox, job.task, finals


@pytest.mark.parametrize("streamed", [True, False], ids=["event-stream", "json"])
def test_the_backend_says_start_when_vllm_begins_a_streamed_answer_before_its_first_bytes(streamed, monkeypatch):
    first_chunk = asyncio.Event()
    content_type = b"text/event-stream; charset=utf-8" if streamed else b"application/json"

    async def app(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]})
        await first_chunk.wait()  # vLLM is still prefilling
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def scenario():
        streams = await StreamSocket().start()
        try:
            inbox, serving, finals = await _serve_with_app(streams, app, monkeypatch)
            if streamed:
                assert await asyncio.wait_for(inbox.queue.get(), 5) == (START, b"")
            else:
                await asyncio.sleep(0.2)
                assert inbox.queue.empty()  # a whole JSON answer goes through Triton, status and all
            first_chunk.set()
            if streamed:
                assert await asyncio.wait_for(inbox.queue.get(), 5) == (DATA, b"data: 1\n\n")
                assert await asyncio.wait_for(inbox.queue.get(), 5) == (END, b"")
            await asyncio.wait_for(serving, 5)
            assert len(finals) == 1 and inbox.queue.empty()
        finally:
            await streams.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("listens", [True, False], ids=["app-listens", "app-ignores-the-disconnect"])
def test_a_cancelled_openai_request_is_told_to_vllms_app_as_a_disconnect_and_its_late_answer_goes_nowhere(
    listens, monkeypatch
):
    """vllm serve's routes (with_cancellation) generate in a task of their own and stop it when receive() says
    http.disconnect, then answer anyway; cancelling the app's own task would leave that task generating."""
    monkeypatch.setattr(openai_serving, "OPENAI_DISCONNECT_GRACE_S", 0.3)
    generating = asyncio.Event()
    work_cancelled = asyncio.Event()

    async def generate():
        generating.set()
        try:
            await asyncio.sleep(30)  # the engine making a long non-streamed answer
        except asyncio.CancelledError:
            work_cancelled.set()
            raise

    async def app(scope, receive, send):
        await receive()  # the body
        work = asyncio.ensure_future(generate())
        if listens:
            disconnect = asyncio.ensure_future(receive())
            await asyncio.wait([work, disconnect], return_when=asyncio.FIRST_COMPLETED)
            assert disconnect.result() == {"type": "http.disconnect"}
            work.cancel()
        else:
            await work
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"null", "more_body": False})

    async def scenario():
        streams = await StreamSocket().start()
        try:
            inbox, serving, finals = await _serve_with_app(streams, app, monkeypatch, endpoint="/v1/completions")
            await asyncio.wait_for(generating.wait(), 5)
            inbox.cancel()  # the client went away: the gateway's CANCEL frame
            await asyncio.wait_for(work_cancelled.wait(), 5)
            await asyncio.wait_for(serving, 5)
            # One final response, the cancellation's error, not the app's late answer.
            assert len(finals) == 1 and finals[0].args[1:] == ("request was cancelled", "CANCELLED")
        finally:
            await streams.close()

    asyncio.run(scenario())


def test_the_client_gets_the_headers_at_start_before_the_first_chunk():
    async def scenario():
        first_chunk = asyncio.Event()
        triton = LocalBackend(frames=[(START, b""), (WAIT, first_chunk), *SSE])
        client, streams = await _client(triton)
        try:
            # The response object comes once the headers are in; the first chunk waits for the test.
            response = await asyncio.wait_for(client.post("/v1/chat/completions", json=STREAM), 5)
            assert (response.status, response.content_type) == (200, "text/event-stream")
            first_chunk.set()
            assert await response.read() == b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
        finally:
            await _stop(client, streams)

    asyncio.run(scenario())


@pytest.mark.parametrize("endpoint", ["/v1/chat/completions", "/v1/messages"])
@pytest.mark.parametrize("use_socket", [True, False], ids=["socket", "through-triton"])
@pytest.mark.parametrize("fails", ["mid-stream", "after-the-last-chunk"])
def test_an_app_that_fails_after_its_stream_began_ends_the_stream_with_an_error_event(
    fails, use_socket, endpoint, monkeypatch
):
    # vLLM's app answers its own errors; a failing middleware (or a bug) raises through it instead. The stream then
    # ends at once, as vLLM's generators end one (an error event, [DONE]), not when the gateway gives up waiting.
    async def app(scope, receive, send):
        await receive()
        start = {"type": "http.response.start", "status": 200}
        await send({**start, "headers": [(b"content-type", b"text/event-stream; charset=utf-8")]})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": fails == "mid-stream"})
        raise RuntimeError("a middleware broke")

    errors, sent = [], []

    async def scenario():
        streams = await StreamSocket().start()
        try:
            inbox, serving, finals = await _serve_with_app(
                streams, app, monkeypatch, errors=errors, sent=sent, use_socket=use_socket, endpoint=endpoint
            )
            await asyncio.wait_for(serving, 5)
            assert len(finals) == 1
            status, final_bytes = finals[0].args[0]
            assert status == 200  # the stream had begun with it
            if use_socket:
                count = 4 if fails == "mid-stream" else 3  # with the error event's DATA frame
                frames = [await asyncio.wait_for(inbox.queue.get(), 5) for _ in range(count)]
                assert frames[:2] == [(START, b""), (DATA, b"data: 1\n\n")] and frames[-1] == (END, b"")
                assert final_bytes == b"" and not sent
                await asyncio.sleep(0.1)
                assert inbox.queue.empty()
                body = b"".join(payload for kind, payload in frames if kind == DATA)
            else:
                body = b"".join(data for _, data in sent) + final_bytes
            return body
        finally:
            await streams.close()

    events = asyncio.run(scenario()).decode().split("\n\n")
    assert events[0] == "data: 1"
    if fails == "mid-stream" and endpoint == "/v1/messages":  # an error event, the only kind its clients read
        kind, data = events[1].split("\n")
        assert kind == "event: error" and events[2:] == [""]
        error = json.loads(data.removeprefix("data: "))
        assert error == {"type": "error", "error": {"type": "internal_error", "message": error["error"]["message"]}}
        assert error["error"]["message"] == "RuntimeError: a middleware broke"
    elif fails == "mid-stream":
        error = json.loads(events[1].removeprefix("data: "))["error"]
        assert error["message"] == "RuntimeError: a middleware broke" and error["code"] == 500
        assert events[2:] == ["data: [DONE]", ""]
    else:
        assert events[1:] == [""]  # the answer was whole: nothing is added to it
    assert len(errors) == 1 and "a middleware broke" in errors[0]


@pytest.mark.parametrize("given", [None, [(b"content-type", b"text/plain"), (b"x-request-id", b"r1")]])
def test_vllms_app_gets_the_client_headers_or_json_where_none_came(given, monkeypatch):
    seen = []

    async def app(scope, receive, send):
        seen.extend(scope["headers"])
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    async def scenario():
        streams = await StreamSocket().start()
        try:
            _, serving, _ = await _serve_with_app(streams, app, monkeypatch, headers=given)
            await asyncio.wait_for(serving, 5)
        finally:
            await streams.close()

    asyncio.run(scenario())
    # A sender that passes on no headers (an older gateway, a Triton client of its own) sends JSON.
    expected = given if given is not None else [(b"content-type", b"application/json")]
    assert seen == [*expected, (b"content-length", b"2")]
