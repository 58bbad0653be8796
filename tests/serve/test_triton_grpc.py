"""serve/triton_grpc.py without a Triton server: the request message the backend reads, and how the client keeps
its streams (reused after a final response; cancelled under a request left unfinished or overdue; ended after an
error), with a stand-in for grpc.aio's stream call that answers each request as a script says. Against the real
server, tests/benchmark/test_bench_e2e.py."""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Callable

import grpc
import pytest
from tritonclient.grpc import service_pb2

from vllm_repo.serve import triton_grpc
from vllm_repo.serve.errors import TritonAnswerError, TritonUnreachable
from vllm_repo.serve.triton_client import GenerateRequest
from vllm_repo.serve.triton_grpc import TritonGrpc, infer_request, unpack_bytes

_CANCELLED = object()


def response(request_id: str, tokens: int, final: bool, text: str | None = None) -> object:
    """A ModelStreamInferResponse of the backend: ``tokens`` new tokens (UINT32), its text when asked."""
    message = service_pb2.ModelStreamInferResponse()
    infer = message.infer_response
    infer.id = request_id
    infer.parameters[triton_grpc.FINAL_FLAG].bool_param = final
    tensor = infer.outputs.add(name="num_output_tokens", datatype="UINT32")
    tensor.shape.append(1)
    infer.raw_output_contents.append(struct.pack("<I", tokens))
    if text is not None:
        tensor = infer.outputs.add(name="text_output", datatype="BYTES")
        tensor.shape.append(1)
        infer.raw_output_contents.append(triton_grpc.pack_bytes(text.encode()))
    return message


def error(request_id: str, words: str) -> object:
    message = service_pb2.ModelStreamInferResponse(error_message=words)
    message.infer_response.id = request_id
    return message


Script = Callable[[object], list[object]]


class FakeCall:
    """grpc.aio's stream-stream call: each request its iterator yields is answered with what ``script`` gives."""

    def __init__(self, requests, script: Script) -> None:
        self.sent: list[object] = []
        self.cancelled = self.ended = False
        self._inbox: asyncio.Queue = asyncio.Queue()
        self._script = script
        self._pump = asyncio.ensure_future(self._take(requests))

    async def _take(self, requests) -> None:
        async for message in requests:
            self.sent.append(message)
            for answer in self._script(message):
                self._inbox.put_nowait(answer)
        self.ended = True  # the client sends no more: the call ends once its answers are read
        self._inbox.put_nowait(grpc.aio.EOF)

    async def read(self):
        answer = await self._inbox.get()
        if answer is _CANCELLED:
            raise asyncio.CancelledError
        return answer

    def cancel(self) -> None:
        if not self.cancelled and not self.ended:
            self.cancelled = True
            self._pump.cancel()
            self._inbox.put_nowait(_CANCELLED)


class FakeStub:
    def __init__(self, script: Script) -> None:
        self.script, self.calls = script, []

    def ModelStreamInfer(self, requests) -> FakeCall:  # grpc's name
        self.calls.append(FakeCall(requests, self.script))
        return self.calls[-1]


def client(script: Script) -> tuple[TritonGrpc, FakeStub]:
    triton = TritonGrpc("127.0.0.1:8001")
    triton._stub = stub = FakeStub(script)
    return triton, stub


def tokens_then_final(message) -> list[object]:
    return [response(message.id, 1, False), response(message.id, 2, True)]


REQUEST = GenerateRequest("Hi", {"max_tokens": 3}, returned=("num_output_tokens",), text_output=False)


async def read(triton: TritonGrpc, request: GenerateRequest = REQUEST, timeout: float = 30) -> list:
    return [r async for r in triton.generate_stream("tiny", request, timeout)]


def test_the_request_carries_the_backends_tensors_and_asks_for_the_final_flag():
    request = GenerateRequest("Hé", {"max_tokens": 2}, returned=("num_output_tokens",), text_output=True)
    message = infer_request(request, "tiny", "id-1")
    assert (message.model_name, message.id) == ("tiny", "id-1")
    assert message.parameters[triton_grpc.ENABLE_FINAL_FLAG].bool_param
    inputs = {
        t.name: (t.datatype, list(t.shape), raw)
        for t, raw in zip(message.inputs, message.raw_input_contents, strict=True)
    }
    assert unpack_bytes(inputs["text_input"][2]) == ["Hé".encode()] and inputs["text_input"][:2] == ("BYTES", [1])
    assert json.loads(unpack_bytes(inputs["sampling_parameters"][2])[0]) == {"max_tokens": 2}
    flags = {"stream": b"\x01", "exclude_input_in_output": b"\x01", "return_num_output_tokens": b"\x01"}
    assert {name: raw for name, (datatype, _, raw) in inputs.items() if datatype == "BOOL"} == flags
    assert [o.name for o in message.outputs] == ["text_output", "num_output_tokens"]


def test_requests_one_after_another_go_on_one_stream_and_at_once_on_one_each():
    async def run() -> tuple[list, list, int, FakeStub]:
        triton, stub = client(tokens_then_final)
        first = await read(triton)
        second = await read(triton)
        assert triton.streams_opened == 1
        together = await asyncio.gather(*(read(triton) for _ in range(3)))
        opened = triton.streams_opened
        await triton.close()
        return [first, second, *together], [c.sent for c in stub.calls], opened, stub

    answers, sent, opened, stub = asyncio.run(run())
    assert [[(r.num_output_tokens, r.final) for r in a] for a in answers] == [[(1, False), (2, True)]] * 5
    assert opened == 3 and len(sent[0]) >= 2  # the idle one and two more; the first carried both in a row
    ids = [m.id for messages in sent for m in messages]
    assert len(set(ids)) == 5  # one id a request, never reused
    assert all(c.ended and not c.cancelled for c in stub.calls)  # close() ends the streams, it cancels none


def test_a_response_of_another_request_is_not_this_ones_and_text_is_read_when_asked():
    def stale_first(message) -> list[object]:
        return [response("earlier", 9, True), response(message.id, 1, True, text="é")]

    async def run() -> list:
        triton, _ = client(stale_first)
        request = GenerateRequest("Hi", {"max_tokens": 1}, returned=("num_output_tokens",))
        try:
            return await read(triton, request)
        finally:
            await triton.close()

    (only,) = asyncio.run(run())
    assert (only.num_output_tokens, only.text, only.final) == (1, "é", True)


def test_an_error_response_raises_the_servers_words_and_its_stream_is_not_used_again():
    def fails_first(message) -> list[object]:
        return [error(message.id, "model is not ready")] if message.id.endswith("-1") else tokens_then_final(message)

    async def run() -> tuple[TritonAnswerError, FakeStub, int]:
        triton, stub = client(fails_first)
        with pytest.raises(TritonAnswerError) as failed:
            await read(triton)
        await read(triton)
        opened = triton.streams_opened
        await triton.close()
        return failed.value, stub, opened

    failed, stub, opened = asyncio.run(run())
    assert failed.server_message == "model is not ready" and "127.0.0.1:8001" in failed.message
    assert opened == 2 and stub.calls[0].ended and not stub.calls[0].cancelled  # ended, not cancelled


def test_a_request_left_before_its_final_response_is_cancelled_with_its_stream():
    async def run() -> tuple[FakeStub, int]:
        triton, stub = client(tokens_then_final)
        stream = triton.generate_stream("tiny", REQUEST)
        async for _ in stream:
            break
        await stream.aclose()
        await read(triton)
        opened = triton.streams_opened
        await triton.close()
        return stub, opened

    stub, opened = asyncio.run(run())
    assert stub.calls[0].cancelled and opened == 2 and not stub.calls[1].cancelled


def test_a_request_without_its_final_response_in_time_fails_and_is_cancelled():
    async def run() -> tuple[TritonUnreachable, FakeStub]:
        triton, stub = client(lambda message: [response(message.id, 1, False)])
        with pytest.raises(TritonUnreachable) as late:
            await read(triton, timeout=0.2)
        await triton.close()
        return late.value, stub

    late, stub = asyncio.run(run())
    assert "no final response in 0.2 s" in late.message and stub.calls[0].cancelled
