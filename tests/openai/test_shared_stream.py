"""The gateway's shared Triton stream: many requests on one ModelStreamInfer stream, told apart by request id.

Triton's side is a stand-in gRPC server speaking Triton's own protocol (tritonclient's service definition), which
answers each request on the stream it came on, in the order its answers are ready; the client is the gateway's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from vllm_repo.serve.openai.triton import TritonOpenAIClient, TritonUnavailable, pack_bytes, unpack_bytes


def response(request_id: str, body: bytes, final: bool) -> service_pb2.ModelStreamInferResponse:
    infer = service_pb2.ModelInferResponse(id=request_id, model_name="tiny")
    infer.outputs.add(name="openai_status", datatype="INT32", shape=[1])
    infer.outputs.add(name="openai_response", datatype="BYTES", shape=[1])
    infer.raw_output_contents.extend([struct.pack("<i", 200), pack_bytes(body)])
    infer.parameters["triton_final_response"].bool_param = final
    return service_pb2.ModelStreamInferResponse(infer_response=infer)


class StandInTriton(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Answers each request with b"<name>:1" then, after the request's own delay, a final b"<name>:2". A request
    named "fail" fails the whole stream; one named "error" gets an error response (with its id, as Triton's have)."""

    def __init__(self) -> None:
        self.streams = 0
        self.released = asyncio.Event()

    async def ModelStreamInfer(self, request_iterator, context):
        self.streams += 1
        out: asyncio.Queue = asyncio.Queue()

        async def answer(request) -> None:
            body = json.loads(unpack_bytes(request.raw_input_contents[1])[0])["body"]
            name = body["name"]
            if name == "error":
                out.put_nowait(
                    service_pb2.ModelStreamInferResponse(
                        error_message="in this model: no", infer_response=service_pb2.ModelInferResponse(id=request.id)
                    )
                )
                return
            out.put_nowait(None if name == "fail" else response(request.id, f"{name}:1".encode(), False))
            if body.get("hold"):
                await self.released.wait()
            await asyncio.sleep(body.get("delay", 0))
            out.put_nowait(response(request.id, f"{name}:2".encode(), True))

        answering: set[asyncio.Task] = set()

        async def read() -> None:
            async for request in request_iterator:
                task = asyncio.ensure_future(answer(request))
                answering.add(task)
                task.add_done_callback(answering.discard)

        reader = asyncio.ensure_future(read())
        try:
            while (item := await out.get()) is not None:
                yield item
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the server is going away")
        finally:
            reader.cancel()


@contextlib.asynccontextmanager
async def triton_and_client():
    servicer = StandInTriton()
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    client = TritonOpenAIClient(f"127.0.0.1:{port}")
    try:
        yield servicer, client
    finally:
        await client.close()
        await server.stop(grace=None)


async def answer(client, name: str, **options) -> list[bytes]:
    body = {"name": name, **options}
    return [chunk.body async for chunk in client.call("tiny", "/v1/chat/completions", body, shared=True)]


def test_requests_on_the_shared_stream_each_get_their_own_responses_whatever_their_order():
    async def scenario():
        async with triton_and_client() as (triton, client):
            slow, fast = await asyncio.gather(answer(client, "slow", delay=0.2), answer(client, "fast"))
            assert (slow, fast) == ([b"slow:1", b"slow:2"], [b"fast:1", b"fast:2"])
            assert await answer(client, "later") == [b"later:1", b"later:2"]
            assert triton.streams == 1

    asyncio.run(scenario())


def test_a_request_s_error_reaches_only_that_request():
    async def scenario():
        async with triton_and_client() as (triton, client):
            ok = asyncio.ensure_future(answer(client, "ok", delay=0.2))
            with pytest.raises(TritonUnavailable, match="in this model: no"):
                await answer(client, "error")
            assert await ok == [b"ok:1", b"ok:2"]
            assert triton.streams == 1

    asyncio.run(scenario())


def test_a_failing_stream_fails_every_request_on_it_and_the_next_request_opens_another():
    async def scenario():
        async with triton_and_client() as (triton, client):
            waiting = asyncio.ensure_future(answer(client, "waiting", hold=True))
            await asyncio.sleep(0.1)
            with pytest.raises(TritonUnavailable, match="going away"):
                await answer(client, "fail")
            with pytest.raises(TritonUnavailable, match="going away"):
                await asyncio.wait_for(waiting, 5)
            assert await answer(client, "after") == [b"after:1", b"after:2"]
            assert triton.streams == 2

    asyncio.run(scenario())


def test_a_request_whose_client_left_stops_being_listened_to_and_the_stream_goes_on():
    async def scenario():
        async with triton_and_client() as (triton, client):
            chunks = client.call("tiny", "/v1/chat/completions", {"name": "left", "hold": True}, shared=True)
            assert (await anext(chunks)).body == b"left:1"
            await chunks.aclose()
            stream = client._shared._current
            assert not stream.waiting
            triton.released.set()  # its final response comes, for nobody
            await asyncio.sleep(0.1)
            assert await answer(client, "next") == [b"next:1", b"next:2"]
            assert triton.streams == 1 and not stream.waiting

    asyncio.run(scenario())
