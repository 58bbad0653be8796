"""The gateway's side of Triton: one gRPC channel, and a decoupled stream per OpenAI request or one shared stream.

Each OpenAI request becomes one Triton request to the model's bundled backend, carrying the client's body in the
``openai_request`` input (the backend's contract.py); the backend answers with vLLM's own OpenAI serving layer and
every response holds an HTTP status and bytes to write as they are. Triton cancels requests only with their stream,
so a request goes on a stream of its own: a client that goes away takes exactly its own request down, and the backend
aborts it in the engine. Requests whose cancellation goes another way (the stream socket's CANCEL frame, to a backend
known to read it) share one long-lived stream instead (SharedStream), which spares each of them a stream's setup.

The protobuf messages are tritonclient's own (tritonclient.grpc.service_pb2); the raw stub is used rather than
tritonclient's aio wrapper, which would turn every chunk into numpy arrays and an InferResult first.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import struct
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from vllm_repo.backend.vllm_repo_backend import hops
from vllm_repo.backend.vllm_repo_backend.contract import (
    OPENAI_REQUEST_INPUT,
    OPENAI_RESPONSE_OUTPUT,
    OPENAI_STATUS_OUTPUT,
)
from vllm_repo.serve.triton_grpc import ENABLE_FINAL_FLAG, FINAL_FLAG, STREAM_END_WAIT_S, pack_bytes, unpack_bytes

# The hop benchmarks' timestamps (hops.py): with VLLM_REPO_TRACE_HOPS unset, one reference compared per site.
_hop, _no_hop = hops.hop, hops.off
# Seconds a readiness or index query may take before Triton counts as unreachable.
QUERY_TIMEOUT_S = 5.0
# How soon the channel tries again to reach a Triton it could not connect to (gRPC's default grows to 2 minutes).
RECONNECT_BACKOFF_MS = 500


class TritonUnavailable(Exception):
    """Triton did not answer, or answered a request with an error instead of the backend's responses."""


@dataclasses.dataclass(frozen=True)
class Chunk:
    """One backend response: the HTTP status (set on every response of an OpenAI request) and bytes to write."""

    status: int | None
    body: bytes
    final: bool


def openai_infer_request(
    model: str,
    endpoint: str,
    body: Any = None,
    request_id: str = "",
    stream_to: dict[str, Any] | None = None,
    headers: list[list[str]] | None = None,
) -> Any:
    """The Triton request that carries one OpenAI request. text_input is sent empty: older config.pbtxt files list
    it as required, and the backend ignores it beside openai_request. ``stream_to``: the gateway's stream socket
    and the stream's id there (vllm_repo.serve.openai.stream_socket); ``headers``: the client's, for vLLM's app."""
    envelope: dict[str, Any] = {"endpoint": endpoint}
    if body is not None:
        envelope["body"] = body
    if stream_to is not None:
        envelope["stream_to"] = stream_to
    if headers is not None:
        envelope["headers"] = headers
    request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    request.parameters[ENABLE_FINAL_FLAG].bool_param = True
    for name, value in (("text_input", b""), (OPENAI_REQUEST_INPUT, json.dumps(envelope).encode())):
        tensor = request.inputs.add(name=name, datatype="BYTES")
        tensor.shape.append(1)
        request.raw_input_contents.append(pack_bytes(value))
    for name in (OPENAI_STATUS_OUTPUT, OPENAI_RESPONSE_OUTPUT):
        request.outputs.add(name=name)
    return request


def read_chunk(response: Any) -> Chunk:
    """A Triton response of the backend's OpenAI path as a Chunk; TritonUnavailable for Triton's error response."""
    if response.error_message:
        raise TritonUnavailable(response.error_message)
    infer = response.infer_response
    final = infer.parameters[FINAL_FLAG].bool_param if FINAL_FLAG in infer.parameters else False
    status, body = None, b""
    for tensor, raw in zip(infer.outputs, infer.raw_output_contents, strict=False):
        if tensor.name == OPENAI_STATUS_OUTPUT and len(raw) >= 4:
            (status,) = struct.unpack_from("<i", raw)
        elif tensor.name == OPENAI_RESPONSE_OUTPUT:
            body = b"".join(unpack_bytes(raw))
    return Chunk(status, body, final)


class SharedStream:
    """One ModelStreamInfer stream that carries many requests at once, their responses told apart by request id
    (Triton puts the id on every response, its errors included). On 2 cores a request the backend answers at once
    took 0.34-0.40 ms there and back on a shared stream, and 0.62-0.72 ms on a stream of its own. A stream that
    fails fails every request on it; the next request opens a new one."""

    def __init__(self, stub: Any, address: str) -> None:
        self._stub = stub
        self._address = address
        self._prefix = uuid.uuid4().hex[:8]  # request ids unique among the gateways one Triton serves
        self._ids = itertools.count(1)
        self._current: _StreamCall | None = None

    def _stream(self) -> _StreamCall:
        if self._current is None or self._current.reader.done():
            self._current = _StreamCall(self._stub, self._address)
        return self._current

    async def call(self, request: Any) -> AsyncGenerator[Chunk, None]:
        """``request``'s responses as Chunks, up to its final one. Closing the iterator early only stops listening:
        the request goes on in Triton until its backend ends it."""
        stream = self._stream()
        request.id = f"{self._prefix}-{next(self._ids)}"
        if _hop is not _no_hop:
            _hop("GI", request.id)
        inbox: asyncio.Queue = asyncio.Queue()
        stream.waiting[request.id] = inbox
        stream.outbox.put_nowait(request)
        try:
            while True:
                item = await inbox.get()
                if isinstance(item, TritonUnavailable):
                    raise item
                chunk = read_chunk(item)
                yield chunk
                if chunk.final:
                    return
        finally:
            stream.waiting.pop(request.id, None)

    def close(self) -> None:
        """Cancels the stream, and with it, in Triton, every request it still carries."""
        if self._current is not None:
            self._current.cancel()
            self._current = None


class _StreamCall:
    """One stream of a SharedStream: requests go out from ``outbox``, responses to ``waiting``'s queues by id."""

    def __init__(self, stub: Any, address: str) -> None:
        self.address = address
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.waiting: dict[str, asyncio.Queue] = {}
        self._call = stub.ModelStreamInfer(self._requests())
        self.reader = asyncio.ensure_future(self._read())

    async def _requests(self) -> AsyncIterator[Any]:
        while True:
            request = await self.outbox.get()
            if _hop is not _no_hop:
                _hop("G2", request.id)
            yield request

    async def _read(self) -> None:
        failure = TritonUnavailable(f"Triton at {self.address} ended the gateway's shared stream")
        try:
            async for response in self._call:
                inbox = self.waiting.get(response.infer_response.id)
                if inbox is not None:  # None: its client went away, and with it whoever waited for it
                    inbox.put_nowait(response)
        except grpc.aio.AioRpcError as exc:
            failure = TritonUnavailable(f"Triton at {self.address}: {exc.details() or exc.code().name}")
        except asyncio.CancelledError:
            pass
        finally:
            for inbox in self.waiting.values():
                inbox.put_nowait(failure)

    def cancel(self) -> None:
        self._call.cancel()
        self.reader.cancel()


class TritonOpenAIClient:
    """Talks to one Triton server's gRPC endpoint for the gateway."""

    def __init__(self, grpc_address: str) -> None:
        self.address = grpc_address
        # Chunks are small but a whole non-streamed completion (n choices, logprobs) can pass gRPC's 4 MiB default.
        options = [("grpc.max_receive_message_length", 256 * 2**20), ("grpc.max_send_message_length", 64 * 2**20)]
        # A Triton that is not listening yet (its models load first) is tried again within a second, not after gRPC's
        # backoff, which grows to 20 s and more while a client polls: the gateway would answer 503 that long after.
        options += [(f"grpc.{kind}_reconnect_backoff_ms", RECONNECT_BACKOFF_MS) for kind in ("initial", "min", "max")]
        self._channel = grpc.aio.insecure_channel(grpc_address, options=options)
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self._speaks_openai: dict[tuple[str, str], bool] = {}
        self._shared = SharedStream(self._stub, grpc_address)

    async def close(self) -> None:
        self._shared.close()
        await self._channel.close()

    async def server_ready(self) -> bool:
        try:
            reply = await self._stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=QUERY_TIMEOUT_S)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.ready)

    async def openai_models(self) -> list[str]:
        """The ready models whose backend takes OpenAI requests (their config has the openai_request input)."""
        try:
            index = await self._stub.RepositoryIndex(
                service_pb2.RepositoryIndexRequest(ready=True), timeout=QUERY_TIMEOUT_S
            )
        except grpc.aio.AioRpcError as exc:
            raise TritonUnavailable(f"Triton at {self.address} did not answer: {exc.details()}") from exc
        ready = [(m.name, m.version) for m in index.models if m.state == "READY"]
        checks = await asyncio.gather(*(self._speaks(name, version) for name, version in ready))
        return sorted({name for (name, _), speaks in zip(ready, checks, strict=True) if speaks})

    async def _speaks(self, name: str, version: str) -> bool:
        key = (name, version)
        if key not in self._speaks_openai:
            try:
                reply = await self._stub.ModelConfig(
                    service_pb2.ModelConfigRequest(name=name, version=version), timeout=QUERY_TIMEOUT_S
                )
            except grpc.aio.AioRpcError:
                return False  # unloaded meanwhile: not cached, asked again next time
            self._speaks_openai[key] = any(i.name == OPENAI_REQUEST_INPUT for i in reply.config.input)
        return self._speaks_openai[key]

    async def call(
        self,
        model: str,
        endpoint: str,
        body: Any = None,
        stream_to: dict[str, Any] | None = None,
        shared: bool = False,
        headers: list[list[str]] | None = None,
    ) -> AsyncGenerator[Chunk, None]:
        """The backend's responses to one OpenAI request, as they arrive. Closing the iterator early (the client
        went away) cancels the request's own stream, and with it the request in the engine; a ``shared`` request
        must be cancelled another way."""
        request = openai_infer_request(model, endpoint, body, stream_to=stream_to, headers=headers)
        if shared:
            async with contextlib.aclosing(self._shared.call(request)) as chunks:
                async for chunk in chunks:
                    yield chunk
            return
        stream = self._stub.ModelStreamInfer(iter([request]))
        final = False
        try:
            async for response in stream:
                chunk = read_chunk(response)
                final = chunk.final
                yield chunk
                if final:
                    return
        except grpc.aio.AioRpcError as exc:
            raise TritonUnavailable(f"Triton at {self.address}: {exc.details() or exc.code().name}") from exc
        finally:
            if final and not stream.done():
                # The call ends on its own right after the final response: wait for that rather than cancel it.
                # Triton 2.51 keeps a model whose streams were cancelled from ever unloading (a reload, tune).
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(stream.code(), STREAM_END_WAIT_S)
            # Before the final response, cancelling is what makes Triton cancel the request.
            if not stream.done():
                stream.cancel()
