"""Triton's gRPC endpoint with the vLLM backend's streaming contract, for a load generator.

``TritonGrpc.generate_stream`` sends each request on a ModelStreamInfer stream that stays open, one request in flight
on it at a time, as perf_analyzer drives a decoupled model (each of its contexts starts one stream and sends its
requests on it): a stream is opened only when every open one is busy, so a load of N streams opens N of them once. A
stream per request adds its setup to every request's time to first token: on 2 cores, the tiny model's median was
15.9 ms with tritonclient's stream per request against 14.9 ms on streams kept open (200 requests each, interleaved).

The requests and responses are tritonclient's protobuf messages on grpc.aio's raw stub; responses are read through
tritonclient's InferResult (which knows every datatype). Readiness and the repository index go through tritonclient's
asyncio client, whose errors say what did not answer. It imports tritonclient and grpc (the full extra): bench
imports it when its native client opens, and validate never.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import struct
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import grpc
from tritonclient.grpc import InferResult, service_pb2, service_pb2_grpc

from vllm_repo.serve.errors import TritonAnswerError, TritonUnreachable
from vllm_repo.serve.triton_client import GENERATE_TIMEOUT_S, GenerateRequest, GenerateResponse, ModelEntry

# How long an open stream may take to end once told there is nothing more to send, before it is cancelled. Triton
# 2.51 keeps a model whose streams were cancelled from ever unloading (tune's reloads), so streams end, not cancel.
STREAM_END_WAIT_S = 5.0
# Without it a decoupled stream never says which response was a request's last.
FINAL_FLAG = "triton_final_response"
ENABLE_FINAL_FLAG = "triton_enable_empty_final_response"


def pack_bytes(*items: bytes) -> bytes:
    """Triton's wire form of a BYTES tensor: each element as a 4-byte little-endian length and its bytes."""
    return b"".join(struct.pack("<I", len(item)) + item for item in items)


def unpack_bytes(raw: bytes) -> list[bytes]:
    items, offset = [], 0
    while offset + 4 <= len(raw):
        (size,) = struct.unpack_from("<I", raw, offset)
        items.append(raw[offset + 4 : offset + 4 + size])
        offset += 4 + size
    return items


def infer_request(request: GenerateRequest, model: str, request_id: str) -> Any:
    """The ModelInferRequest of ``request``: the backend's input tensors (one element each), the outputs asked for."""
    message = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    message.parameters[ENABLE_FINAL_FLAG].bool_param = True
    values: list[tuple[str, bytes | bool]] = [("text_input", request.prompt.encode())]
    values.append(("sampling_parameters", request.sampling_json().encode()))
    values += list(request.flags().items())
    for name, value in values:
        tensor = message.inputs.add(name=name, datatype="BYTES" if isinstance(value, bytes) else "BOOL")
        tensor.shape.append(1)
        message.raw_input_contents.append(pack_bytes(value) if isinstance(value, bytes) else bytes([value]))
    for name in request.output_names():
        message.outputs.add(name=name)
    return message


def _grpc_words(error: Any) -> str:
    return str(error.details() if isinstance(error, grpc.aio.AioRpcError) else getattr(error, "message", error))


class _Stream:
    """One ModelStreamInfer call: requests go out through ``outbox`` (None ends the call's sending side), its
    responses are read by whoever sent the request in flight."""

    def __init__(self, stub: Any) -> None:
        self.outbox: asyncio.Queue[Any] = asyncio.Queue()
        self.call = stub.ModelStreamInfer(self._requests())

    async def _requests(self) -> AsyncIterator[Any]:
        while (message := await self.outbox.get()) is not None:
            yield message

    async def end(self) -> None:
        """Send nothing more and read the call to its end, which Triton gives once its requests have answered; a
        call that does not end in STREAM_END_WAIT_S is cancelled."""
        self.outbox.put_nowait(None)
        with contextlib.suppress(asyncio.TimeoutError, grpc.aio.AioRpcError):
            await asyncio.wait_for(self._read_to_end(), STREAM_END_WAIT_S)
        self.call.cancel()  # a no-op on a call that has ended

    async def _read_to_end(self) -> None:
        while await self.call.read() is not grpc.aio.EOF:
            pass


class TritonGrpc:
    """Triton's gRPC endpoint at ``address`` (HOST:PORT), opened at the first call (in the event loop that uses it)."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._client: Any = None
        self._channel: Any = None
        self._stub: Any = None
        self._idle: list[_Stream] = []
        self._ending: set[asyncio.Task[None]] = set()
        self._prefix = uuid.uuid4().hex[:8]  # request ids unique among the clients one Triton serves
        self._ids = itertools.count(1)
        self.streams_opened = 0

    @property
    def client(self) -> Any:
        """tritonclient.grpc.aio's InferenceServerClient."""
        if self._client is None:
            import tritonclient.grpc.aio as grpcaio

            self._client = grpcaio.InferenceServerClient(self.address)
        return self._client

    def _open_stream(self) -> _Stream:
        if self._stub is None:
            self._channel = grpc.aio.insecure_channel(self.address)
            self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self.streams_opened += 1
        return _Stream(self._stub)

    def _retire(self, stream: _Stream, request_over: bool) -> None:
        """A stream not to use again: one whose request is over ends (see _Stream.end); one whose request is not
        is cancelled, and Triton cancels that request."""
        if not request_over:
            stream.call.cancel()
            return
        task = asyncio.ensure_future(stream.end())
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        await asyncio.gather(*(stream.end() for stream in idle), *self._ending)
        if self._channel is not None:
            await self._channel.close()
            self._channel = self._stub = None
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _ask(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        from tritonclient.utils import InferenceServerException

        try:
            return await call(*args, **kwargs)
        except InferenceServerException as exc:  # what tritonclient raises when nothing answers
            raise TritonUnreachable(self.address, _grpc_words(exc)) from None

    async def model_ready(self, model: str) -> bool:
        return bool(await self._ask(self.client.is_model_ready, model))

    async def repository_index(self) -> list[ModelEntry]:
        index = await self._ask(self.client.get_model_repository_index, as_json=True)
        return [ModelEntry.from_json(m) for m in index.get("models", []) if "name" in m]

    async def generate_stream(
        self, model: str, request: GenerateRequest, timeout: float = GENERATE_TIMEOUT_S
    ) -> AsyncGenerator[GenerateResponse, None]:
        """One request on an open stream (a new one where all are busy); yields each response as it arrives, the last
        one ``final``. An error response raises TritonAnswerError (the server's words); a broken stream, or none
        answering, TritonUnreachable. A request left before its final response is cancelled with its stream."""
        stream = self._idle.pop() if self._idle else self._open_stream()
        request_id = f"{self._prefix}-{next(self._ids)}"
        stream.outbox.put_nowait(infer_request(request, model, request_id))
        over = reusable = expired = False

        def expire() -> None:  # one timer a request, rather than one a response
            nonlocal expired
            expired = True
            stream.call.cancel()

        timer = asyncio.get_running_loop().call_later(timeout, expire)
        try:
            while True:
                message = await stream.call.read()
                received = time.perf_counter()
                if message is grpc.aio.EOF:
                    raise TritonUnreachable(self.address, "the server ended the stream before the final response")
                if message.error_message:
                    over = True  # Triton's error response ends its request
                    words = message.error_message
                    text = f"model '{model}' at {self.address} answered an error: {words}"
                    raise TritonAnswerError(text, url=self.address, status=None, server_message=words)
                if message.infer_response.id != request_id:
                    continue  # an earlier request's, on a stream that carried it: never this one's
                response = GenerateResponse.from_infer_result(InferResult(message.infer_response), request, received)
                over = reusable = response.final
                yield response
                if response.final:
                    return
        except (asyncio.CancelledError, grpc.aio.AioRpcError) as exc:
            if expired:
                raise TritonUnreachable(self.address, f"no final response in {timeout:g} s") from None
            if isinstance(exc, asyncio.CancelledError):
                raise
            over = True  # the call itself has failed
            raise TritonUnreachable(self.address, _grpc_words(exc)) from None
        finally:
            timer.cancel()
            if reusable:
                self._idle.append(stream)
            else:
                self._retire(stream, over)
