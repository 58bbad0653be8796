"""serve/triton_client.py without a Triton server: a local HTTP server plays Triton's answers (health, the repository
index, model control, generate and generate_stream's server-sent events and error events); the gRPC side is
test_triton_grpc.py's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from tests.support.fake_triton import Answer, FakeTriton, fake_triton, sse
from vllm_repo.serve.errors import InferError, TritonAnswerError, TritonUnreachable
from vllm_repo.serve.ports import free_port
from vllm_repo.serve.triton_client import (
    GenerateRequest,
    GenerateResponse,
    GenerateStreamConnection,
    HttpAddress,
    ModelEntry,
    ServerSentEvents,
    TritonHttp,
    answers_openai_api,
)


@pytest.fixture
def triton() -> Iterator[FakeTriton]:
    with fake_triton() as server:
        yield server


STREAM = [
    {"text_output": "Hel", "finish_reason": "None", "num_input_tokens": 3, "num_output_tokens": 1},
    {"text_output": ["lo"], "finish_reason": ["None"], "num_output_tokens": [2]},
    {"text_output": "!", "finish_reason": "length", "num_output_tokens": 1},
]


# -- health, readiness, the repository index, model control -----------------------------------------------------------


def test_health_and_readiness_are_the_status_of_their_endpoints(triton):
    triton.answers[("GET", "/v2/health/live")] = Answer(200)
    triton.answers[("GET", "/v2/health/ready")] = Answer(400)
    triton.answers[("GET", "/v2/models/a%2Fb/ready")] = Answer(200)
    client = TritonHttp(triton.url)
    assert client.server_live() and not client.server_ready()
    assert client.model_ready("a/b") and not client.model_ready("other")  # the name is quoted into the path


def test_nothing_listening_is_unreachable_naming_the_url():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(TritonUnreachable) as refused:
        TritonHttp(url).server_ready()
    assert refused.value.url == url and f"no Triton server answers at {url} (" in refused.value.message
    assert "vllm-repo launch" in refused.value.hint
    assert not answers_openai_api(url)


def test_an_address_that_is_not_http_is_refused_before_any_request():
    for url in ("ftp://x:1", "http://", "http://h:port"):
        with pytest.raises(InferError, match="is not an http"):
            TritonHttp(url)
    bare = HttpAddress.parse("[::1]:8000/triton/")
    assert (bare.host, bare.port, bare.prefix, bare.host_header) == ("::1", 8000, "/triton", "[::1]:8000")


def test_the_repository_index_is_typed_and_keeps_only_what_triton_sent(triton):
    index = [
        {"name": "tiny", "version": "1", "state": "READY", "reason": ""},
        {"name": "bad", "version": "1", "state": "UNAVAILABLE", "reason": "engine died"},
        {"name": "never"},
        {"no name": True},
    ]
    triton.answers[("POST", "/v2/repository/index")] = Answer(body=json.dumps(index).encode())
    models = TritonHttp(triton.url).repository_index()
    assert models == [
        ModelEntry("tiny", "1", "READY", ""),
        ModelEntry("bad", "1", "UNAVAILABLE", "engine died"),
        ModelEntry("never"),
    ]
    assert [m.ready for m in models] == [True, False, False]
    assert models[2].as_json() == {"name": "never"} and models[0].as_json() == index[0]
    assert TritonHttp(triton.url).model_state("bad") == "UNAVAILABLE"
    assert TritonHttp(triton.url).model_state("absent") is None


def test_an_index_that_is_an_error_or_not_tritons_raises_with_the_url(triton):
    triton.answers[("POST", "/v2/repository/index")] = Answer(500, b'{"error":"internal"}')
    with pytest.raises(TritonAnswerError) as failed:
        TritonHttp(triton.url).repository_index()
    assert failed.value.status == 500 and failed.value.server_message == "internal"
    assert triton.url in failed.value.message and "HTTP 500" in failed.value.message
    triton.answers[("POST", "/v2/repository/index")] = Answer(200, b"<html>hello</html>")
    with pytest.raises(TritonAnswerError, match="is not Triton's") as not_json:
        TritonHttp(triton.url).repository_index()
    assert not_json.value.status == 200 and "Triton" in not_json.value.hint


def test_load_and_unload_post_to_the_model_control_api_and_say_tritons_reason(triton):
    triton.answers[("POST", "/v2/repository/models/tiny/unload")] = Answer(200)
    triton.answers[("POST", "/v2/repository/models/tiny/load")] = Answer(400, b'{"error":"failed to load: OOM"}')
    client = TritonHttp(triton.url)
    client.unload_model("tiny")
    with pytest.raises(TritonAnswerError) as failed:
        client.load_model("tiny", timeout=5)
    assert failed.value.server_message == "failed to load: OOM" and failed.value.status == 400
    assert "loading model 'tiny'" in failed.value.message and "explicit" in failed.value.hint
    assert [(m, p) for m, p, _ in triton.requests] == [
        ("POST", "/v2/repository/models/tiny/unload"),
        ("POST", "/v2/repository/models/tiny/load"),
    ]
    triton.answers[("POST", "/v2/repository/models/tiny/load")] = Answer(200)
    client.load_model("tiny")


def test_a_url_with_a_path_prefix_keeps_it(triton):
    triton.answers[("GET", "/proxy/v2/health/ready")] = Answer(200)
    assert TritonHttp(triton.url + "/proxy/").server_ready()


def test_an_openai_api_is_told_apart(triton):
    triton.answers[("GET", "/v1/models")] = Answer(body=b'{"object": "list", "data": []}')
    assert answers_openai_api(triton.url)
    triton.answers[("GET", "/v1/models")] = Answer(body=b"[]")
    assert not answers_openai_api(triton.url)


# -- generate and generate_stream --------------------------------------------------------------------------------------


def test_the_request_body_carries_the_backends_inputs():
    request = GenerateRequest("Hi", {"max_tokens": 4, "temperature": 0.5})
    body = request.http_body()
    assert body["text_input"] == "Hi"
    assert json.loads(body["sampling_parameters"]) == {"max_tokens": 4, "temperature": 0.5}
    assert body["stream"] is True and body["exclude_input_in_output"] is True
    assert {k for k in body if k.startswith("return_")} == {
        "return_finish_reason",
        "return_num_input_tokens",
        "return_num_output_tokens",
    }
    bare = GenerateRequest("Hi", {}, stream=False, exclude_input_in_output=None, returned=()).http_body()
    assert set(bare) == {"text_input", "sampling_parameters", "stream"} and bare["stream"] is False


def test_generate_stream_yields_each_event_typed_as_it_comes(triton):
    # Events split across chunks, and two in one chunk: the parser joins and splits them.
    raw = b"".join(sse(*STREAM))
    triton.answers[("POST", "/v2/models/tiny/generate_stream")] = Answer(chunks=[raw[:10], raw[10:70], raw[70:]])
    body = GenerateRequest("Hi", {"max_tokens": 4}).http_body()
    responses = list(TritonHttp(triton.url).generate_stream("tiny", body))
    assert [r.text for r in responses] == ["Hel", "lo", "!"]
    assert [r.finish_reason for r in responses] == [None, None, "length"]
    assert [r.num_output_tokens for r in responses] == [1, 2, 1] and responses[0].num_input_tokens == 3
    assert all(r.received > 0 for r in responses)
    assert json.loads(triton.requests[0][2]) == body


def test_generate_returns_the_one_response(triton):
    triton.answers[("POST", "/v2/models/tiny/generate")] = Answer(body=json.dumps(STREAM[2]).encode())
    response = TritonHttp(triton.url).generate("tiny", {"text_input": "Hi"})
    assert (response.text, response.finish_reason, response.num_output_tokens) == ("!", "length", 1)


def test_an_error_event_mid_stream_raises_with_the_servers_words(triton):
    events = sse(STREAM[0], {"error": "vLLM engine has died: engine core (log: /x.log)"})
    triton.answers[("POST", "/v2/models/tiny/generate_stream")] = Answer(chunks=events)
    seen = []
    with pytest.raises(TritonAnswerError) as failed:
        for response in TritonHttp(triton.url).generate_stream("tiny", {}):
            seen.append(response.text)
    assert seen == ["Hel"] and failed.value.status is None
    assert failed.value.server_message == "vLLM engine has died: engine core (log: /x.log)"
    assert f"the server at {triton.url} reported an error mid-stream" in failed.value.message


def test_an_http_error_says_the_status_and_the_words_without_sse_framing(triton):
    triton.answers[("POST", "/v2/models/tiny/generate_stream")] = Answer(
        400, b'data: {"error":"unknown key temprature, did you mean temperature?"}\n\n'
    )
    with pytest.raises(TritonAnswerError) as failed:
        list(TritonHttp(triton.url).generate_stream("tiny", {}))
    assert failed.value.status == 400 and "data:" not in failed.value.message
    assert failed.value.server_message == "unknown key temprature, did you mean temperature?"
    assert "generate_stream of model 'tiny'" in failed.value.message and triton.url in failed.value.message


def test_an_event_that_is_not_json_is_an_answer_error(triton):
    triton.answers[("POST", "/v2/models/tiny/generate_stream")] = Answer(chunks=[b"data: <html>\n\n"])
    with pytest.raises(TritonAnswerError, match="not JSON"):
        list(TritonHttp(triton.url).generate_stream("tiny", {}))


def test_server_sent_events_parse_across_any_split():
    raw = b'data: {"a": 1}\r\n\r\n: a comment\nevent: x\ndata: {"b":\ndata: 2}\n\ndata: {"c": 3}'
    for cut in range(len(raw)):
        parser = ServerSentEvents()
        events = parser.feed(raw[:cut]) + parser.feed(raw[cut:]) + parser.end()
        assert [json.loads(e) for e in events] == [{"a": 1}, {"b": 2}, {"c": 3}], cut


# -- generate_stream on asyncio ----------------------------------------------------------------------------------------


def test_the_asyncio_connection_streams_and_keeps_its_connection_alive(triton):
    triton.answers[("POST", "/v2/models/tiny/generate_stream")] = Answer(chunks=sse(*STREAM))

    async def twice() -> list[list[GenerateResponse]]:
        conn = GenerateStreamConnection(triton.url)
        try:
            streams = []
            for _ in range(2):
                streams.append([r async for r in conn.generate_stream("tiny", {"text_input": "Hi"})])
            return streams
        finally:
            await conn.close()

    first, second = asyncio.run(twice())
    assert [r.text for r in first] == [r.text for r in second] == ["Hel", "lo", "!"]
    assert first[0].received <= first[1].received <= first[2].received
    assert len(triton.requests) == 2 and len(triton.connections) == 1  # one keep-alive connection


def test_the_asyncio_connection_raises_the_errors_and_recovers(triton):
    path = ("POST", "/v2/models/tiny/generate_stream")

    async def run() -> tuple[TritonAnswerError, TritonAnswerError, list[str]]:
        conn = GenerateStreamConnection(triton.url)
        try:
            triton.answers[path] = Answer(400, b'{"error":"unknown model"}')
            with pytest.raises(TritonAnswerError) as http_error:
                [r async for r in conn.generate_stream("tiny", {})]
            triton.answers[path] = Answer(chunks=sse(STREAM[0], {"error": "died"}))
            with pytest.raises(TritonAnswerError) as event_error:
                [r async for r in conn.generate_stream("tiny", {})]
            triton.answers[path] = Answer(chunks=sse(*STREAM))
            stream = conn.generate_stream("tiny", {})
            async for _ in stream:
                break  # left unread: the next request must not read its rest
            await stream.aclose()
            after = [r.text async for r in conn.generate_stream("tiny", {})]
            return http_error.value, event_error.value, after
        finally:
            await conn.close()

    http_error, event_error, after = asyncio.run(run())
    assert http_error.status == 400 and http_error.server_message == "unknown model"
    assert event_error.status is None and event_error.server_message == "died"
    assert after == ["Hel", "lo", "!"]


def test_the_asyncio_connection_to_nothing_is_unreachable():
    url = f"http://127.0.0.1:{free_port()}"

    async def run() -> None:
        [r async for r in GenerateStreamConnection(url).generate_stream("tiny", {})]

    with pytest.raises(TritonUnreachable, match=f"no Triton server answers at {url}"):
        asyncio.run(run())
