"""bench's native client measures each request from the responses of the Triton client's gRPC stream: the time to the
first token, the gaps between responses that carry tokens, the server's token counts, and the error a failed
request ends with (the server's words, or what broke the stream)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from vllm_repo.benchmark.clients import NativeClient
from vllm_repo.benchmark.stats import RequestRecord
from vllm_repo.serve.errors import TritonAnswerError
from vllm_repo.serve.triton_client import GenerateRequest, GenerateResponse


class FakeGrpc:
    """TritonGrpc's generate_stream, answering responses whose arrival times are offsets from the request's start."""

    def __init__(self, responses: list[tuple[float, int, bool]], fails: BaseException | None = None) -> None:
        self.responses, self.fails = responses, fails
        self.requests: list[GenerateRequest] = []

    async def generate_stream(
        self, model: str, request: GenerateRequest, timeout: float
    ) -> AsyncGenerator[GenerateResponse, None]:
        self.requests.append(request)
        for offset, tokens, final in self.responses:
            yield GenerateResponse(num_input_tokens=7, num_output_tokens=tokens, final=final, received=offset)
        if self.fails is not None:
            raise self.fails

    async def close(self) -> None:
        pass


def send(fake: FakeGrpc) -> RequestRecord:
    client = NativeClient("127.0.0.1:8001", "tiny")
    client._triton = fake  # type: ignore[assignment]
    return asyncio.run(client.send("Hi", 3))


def test_ttft_gaps_and_counts_come_from_the_responses_that_carry_tokens():
    at = 1e9  # arrival times (time.perf_counter()) after the request's start
    fake = FakeGrpc([(at + 0.5, 1, False), (at + 0.5, 0, False), (at + 0.75, 2, True)])
    record = send(fake)
    assert record.ok and not record.error
    assert record.output_tokens == 3 and record.input_tokens == 7
    assert record.ttft == at + 0.5 - record.start and record.itl == [0.25]  # the empty response is no gap
    assert record.e2e == at + 0.75 - record.start
    request = fake.requests[0]
    assert request.sampling == {"max_tokens": 3, "ignore_eos": True} and not request.text_output
    assert set(request.returned) == {"num_input_tokens", "num_output_tokens"}


def test_an_error_response_records_the_servers_words_and_a_broken_stream_its_exception():
    words = "model is not ready"
    answer = TritonAnswerError("x", url="h:1", status=None, server_message=words)
    assert send(FakeGrpc([(1e9, 1, False)], fails=answer)).error == words
    broken = send(FakeGrpc([], fails=ConnectionResetError("peer went away\nmore")))
    assert broken.error == "ConnectionResetError: peer went away" and not broken.ok


def test_a_stream_without_any_token_is_a_failed_request():
    record = send(FakeGrpc([(1e9, 0, True)]))
    assert not record.ok and record.error == "the stream ended without any generated token"
