"""The OpenAI gateway's own logic: Triton's wire format, addresses, --api-key, routing and the stream copy.

The routing tests put a stand-in for Triton's gRPC side behind the real aiohttp application; what Triton and the
backend really answer is tested end to end in tests/openai/test_gateway_e2e.py.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from tritonclient.grpc import service_pb2

from tests.support.standin_triton import StandInTriton, _client, run
from vllm_repo.errors import UsageError
from vllm_repo.serve.openai import app as gateway_app
from vllm_repo.serve.openai import grpc_address, metrics_url
from vllm_repo.serve.openai.triton import (
    OPENAI_REQUEST_INPUT,
    OPENAI_RESPONSE_OUTPUT,
    OPENAI_STATUS_OUTPUT,
    Chunk,
    TritonUnavailable,
    openai_infer_request,
    pack_bytes,
    read_chunk,
    unpack_bytes,
)

# --- Triton's wire format -------------------------------------------------------------------------------------------


def test_bytes_tensors_round_trip_with_empty_and_binary_elements():
    items = [b"", b"data: {}\n\n", bytes(range(256))]
    assert unpack_bytes(pack_bytes(*items)) == items


def test_the_request_carries_the_envelope_an_empty_text_input_and_asks_for_the_final_flag():
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    request = openai_infer_request("tiny", "/v1/chat/completions", body)
    inputs = {t.name: unpack_bytes(raw) for t, raw in zip(request.inputs, request.raw_input_contents, strict=True)}
    assert inputs["text_input"] == [b""]
    assert json.loads(inputs[OPENAI_REQUEST_INPUT][0]) == {"endpoint": "/v1/chat/completions", "body": body}
    assert request.parameters["triton_enable_empty_final_response"].bool_param is True
    assert {o.name for o in request.outputs} == {OPENAI_STATUS_OUTPUT, OPENAI_RESPONSE_OUTPUT}
    assert "body" not in json.loads(unpack_bytes(openai_infer_request("tiny", "/v1/models").raw_input_contents[1])[0])


def test_the_envelope_carries_the_client_headers_when_given():
    headers = [["content-type", "application/json"], ["x-request-id", "abc"]]
    request = openai_infer_request("tiny", "/v1/completions", {"model": "tiny"}, headers=headers)
    envelope = json.loads(unpack_bytes(request.raw_input_contents[1])[0])
    assert envelope["headers"] == headers
    plain = openai_infer_request("tiny", "/v1/completions", {"model": "tiny"})
    assert "headers" not in json.loads(unpack_bytes(plain.raw_input_contents[1])[0])


def _response(status: int | None, body: bytes | None, final: bool) -> service_pb2.ModelStreamInferResponse:
    response = service_pb2.ModelStreamInferResponse()
    infer = response.infer_response
    infer.parameters["triton_final_response"].bool_param = final
    if status is not None:
        infer.outputs.add(name=OPENAI_STATUS_OUTPUT, datatype="INT32").shape.append(1)
        infer.raw_output_contents.append(status.to_bytes(4, "little", signed=True))
    if body is not None:
        infer.outputs.add(name=OPENAI_RESPONSE_OUTPUT, datatype="BYTES").shape.append(1)
        infer.raw_output_contents.append(pack_bytes(body))
    return response


@pytest.mark.parametrize(
    ("status", "body", "final"),
    [(200, b'data: {"x": 1}\n\n', False), (400, b'{"error": {}}', True), (None, None, True)],
)
def test_a_backend_response_reads_back_as_status_body_and_final_flag(status, body, final):
    assert read_chunk(_response(status, body, final)) == Chunk(status, body or b"", final)


# --- addresses ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "grpc_port", "expected"),
    [
        ("http://127.0.0.1:8000", None, "127.0.0.1:8001"),
        ("http://triton.internal:18000", 18001, "triton.internal:18001"),
        ("grpc://10.0.0.5:9001", None, "10.0.0.5:9001"),
        ("10.0.0.5:9001", None, "10.0.0.5:9001"),
        ("grpc://triton", None, "triton:8001"),
        ("http://[::1]:8000", None, "[::1]:8001"),
    ],
)
def test_the_grpc_address_comes_from_the_url_users_know(url, grpc_port, expected):
    assert grpc_address(url, grpc_port) == expected


@pytest.mark.parametrize(
    ("url", "metrics_port", "expected"),
    [
        ("http://127.0.0.1:8000", None, "http://127.0.0.1:8002/metrics"),
        ("grpc://triton.internal:18001", 18002, "http://triton.internal:18002/metrics"),
        ("10.0.0.5:9001", None, "http://10.0.0.5:8002/metrics"),
        ("http://[::1]:8000", 9102, "http://[::1]:9102/metrics"),
    ],
)
def test_tritons_metrics_endpoint_is_on_the_host_users_name(url, metrics_port, expected):
    assert metrics_url(url, metrics_port) == expected


@pytest.mark.parametrize("url", ["https://", "ftp://host:21", "http://host:port"])
def test_an_unusable_triton_url_is_a_usage_error_naming_it(url):
    with pytest.raises(UsageError, match="--triton-url"):
        grpc_address(url)
    with pytest.raises(UsageError, match="--triton-url"):
        metrics_url(url)


# --- the routes, against a stand-in for Triton ------------------------------------------------------------------------


def test_a_streamed_answer_is_written_chunk_by_chunk_with_the_event_stream_type():
    chunks = [
        Chunk(200, b"data: 1\n\n", False),
        Chunk(200, b"data: 2\n\n", False),
        Chunk(200, b"data: [DONE]\n\n", True),
    ]

    async def scenario():
        triton = StandInTriton(script={"tiny": chunks})
        client = await _client(triton)
        try:
            response = await client.post("/v1/chat/completions", json={"model": "tiny", "stream": True})
            assert response.status == 200
            assert response.content_type == "text/event-stream"
            assert await response.read() == b"data: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
            model, endpoint, body = triton.calls[-1]
            assert (model, endpoint) == ("tiny", "/v1/chat/completions")
            assert json.loads(body) == {"model": "tiny", "stream": True}
        finally:
            await client.close()

    run(scenario())


def test_the_clients_headers_go_to_the_backend_less_the_connections_and_credentials():
    # vLLM's app reads some of them (Content-Type, X-Request-Id, X-Vllm-Priority, the trace context), as vllm serve's.
    async def scenario():
        triton = StandInTriton(script={"tiny": [Chunk(200, b"{}", True)]})
        client = await _client(triton, keys=["k"])
        try:
            response = await client.post(
                "/v1/completions",
                data=b'{"model": "tiny"}',
                headers={
                    "Content-Type": "text/plain",
                    "X-Request-Id": "req-1",
                    "X-Vllm-Priority": "3",
                    "Authorization": "Bearer k",
                    "Cookie": "session=secret",
                    "X-Api-Key": "sk-ant-secret",  # what the anthropic SDK sends its key as
                    "Connection": "keep-alive, X-Hop",
                    "X-Hop": "gateway only",
                },
            )
            assert response.status == 200
            forwarded = triton.headers[-1]
            names = [name for name, _ in forwarded]
            assert ["content-type", "text/plain"] in forwarded
            assert ["x-request-id", "req-1"] in forwarded and ["x-vllm-priority", "3"] in forwarded
            for kept in ("authorization", "cookie", "x-api-key", "connection", "x-hop", "host", "content-length"):
                assert kept not in names
            assert names == [name.lower() for name in names]
        finally:
            await client.close()

    run(scenario())


def test_a_json_object_goes_to_the_backend_as_the_clients_own_text_and_utf16_as_the_object():
    # vLLM parses exactly what the client sent, as vllm serve would: spacing, key order, 1.0, escapes and all.
    sent = '{ "temperature": 1.0,"model":"tiny",  "messages": [{"role": "user", "content": "caf\u00e9 \u2603"}] }'
    chunks = [Chunk(200, b"{}", True)]

    async def scenario():
        triton = StandInTriton(script={"tiny": chunks})
        client = await _client(triton)
        try:
            response = await client.post("/v1/chat/completions", data=sent.encode())
            assert response.status == 200
            assert triton.calls[-1] == ("tiny", "/v1/chat/completions", sent)
            # JSON may come in UTF-16: json.loads reads it; vLLM then gets the object, re-encoded.
            response = await client.post("/v1/chat/completions", data=json.dumps({"model": "tiny"}).encode("utf-16"))
            assert response.status == 200
            assert triton.calls[-1] == ("tiny", "/v1/chat/completions", {"model": "tiny"})
        finally:
            await client.close()

    run(scenario())


def test_the_backends_status_and_body_are_returned_as_they_are():
    error = b'{"error": {"message": "bad", "type": "BadRequestError", "param": null, "code": 400}}'

    async def scenario():
        client = await _client(StandInTriton(script={"tiny": [Chunk(400, error, True)]}))
        try:
            # A streamed request refused before its first chunk gets a JSON error, not an event stream.
            response = await client.post("/v1/completions", json={"model": "tiny", "stream": True})
            assert (response.status, response.content_type, await response.read()) == (400, "application/json", error)
        finally:
            await client.close()

    run(scenario())


def test_a_lora_adapter_name_goes_to_the_model_that_lists_it():
    cards = {"base": [{"id": "base"}], "other": [{"id": "other"}, {"id": "sql-adapter", "parent": "other"}]}

    async def scenario():
        triton = StandInTriton(models=("base", "other"), cards=cards)
        client = await _client(triton)
        try:
            await client.post("/v1/completions", json={"model": "sql-adapter", "prompt": "x"})
            assert triton.calls[-1][0] == "other"
            listing = await (await client.get("/v1/models")).json()
            assert [c["id"] for c in listing["data"]] == ["base", "other", "sql-adapter"]
        finally:
            await client.close()

    run(scenario())


def test_a_request_without_a_model_or_for_an_unloaded_one_is_answered_by_the_gateway():
    # An unknown name: tests/openai/test_gateway_unknown_model.py.
    async def scenario():
        triton = StandInTriton(models=("a", "b"))
        client = await _client(triton)
        try:
            # Several models and no name: no default to pick.
            response = await client.post("/v1/completions", json={"prompt": "x"})
            assert response.status == 400
            assert (await response.json())["error"]["param"] == "model"
            # Unloaded since it was listed: 503 naming it, then, with nothing left, 503 before reaching Triton.
            triton.models = ["b"]
            response = await client.post("/v1/completions", json={"model": "a", "prompt": "x"})
            assert response.status == 503
            assert "model `a` is not ready" in (await response.json())["error"]["message"]
            triton.models = []
            await client.get("/v1/models")
            calls = len(triton.calls)
            response = await client.post("/v1/completions", json={"model": "a", "prompt": "x"})
            assert response.status == 503
            assert len(triton.calls) == calls
        finally:
            await client.close()

    run(scenario())


def test_with_a_single_model_a_request_without_a_name_goes_to_it():
    async def scenario():
        triton = StandInTriton(models=("only",))
        client = await _client(triton)
        try:
            await client.post("/v1/completions", json={"prompt": "x"})
            assert triton.calls[-1][0] == "only"
        finally:
            await client.close()

    run(scenario())


def test_bodies_that_are_not_a_json_object_go_to_a_backend_as_text_for_vllms_answer():
    refusal = Chunk(400, b'{"error": {"code": 400}}', True)

    async def scenario():
        triton = StandInTriton(models=("a", "b"), script={"a": [refusal]})
        client = await _client(triton)
        try:
            for data in ("{not json", "[1, 2]"):
                response = await client.post("/v1/chat/completions", data=data.encode())
                assert response.status == 400
                assert triton.calls[-1] == ("a", "/v1/chat/completions", data)
            triton.models = []
            await client.get("/v1/models")
            assert (await client.post("/v1/chat/completions", data=b"{")).status == 503
        finally:
            await client.close()

    run(scenario())


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages"])
def test_an_error_in_mid_stream_ends_the_stream_with_an_error_event(path):
    script = {"tiny": [Chunk(200, b"data: 1\n\n", False), TritonUnavailable("the model was unloaded")]}

    async def scenario():
        client = await _client(StandInTriton(script=script))
        try:
            response = await client.post(path, json={"model": "tiny", "stream": True})
            return (await response.read()).decode().split("\n\n")
        finally:
            await client.close()

    events = run(scenario())
    assert events[0] == "data: 1"
    if path == "/v1/messages":  # the anthropic SDK reads only named events: an error must be one
        kind, data = events[1].split("\n")
        assert kind == "event: error" and events[2:] == [""]
        error = json.loads(data.removeprefix("data: "))
        assert error == {"type": "error", "error": {"type": "internal_error", "message": "the model was unloaded"}}
    else:
        assert json.loads(events[1].removeprefix("data: "))["error"]["message"] == "the model was unloaded"
        assert events[2:] == ["data: [DONE]", ""]


def test_a_client_that_goes_away_closes_its_triton_call():
    script = {"tiny": [Chunk(200, b"data: 1\n\n", False), "wait"]}

    async def scenario():
        triton = StandInTriton(script=script)
        client = await _client(triton)
        try:
            response = await client.post("/v1/chat/completions", json={"model": "tiny", "stream": True})
            assert await response.content.readuntil(b"\n\n") == b"data: 1\n\n"
            response.close()  # drops the connection mid-stream
            await asyncio.wait_for(triton.closed_early.wait(), 5)
        finally:
            await client.close()

    run(scenario())


def test_health_follows_triton_readiness_and_needs_a_model_that_speaks_openai():
    async def scenario():
        triton = StandInTriton()
        client = await _client(triton)
        try:
            assert (await client.get("/health")).status == 200
            triton.ready = False
            assert (await client.get("/health")).status == 503
            triton.ready, triton.models = True, []
            assert (await client.get("/health")).status == 503
        finally:
            await client.close()

    run(scenario())


@pytest.mark.parametrize(
    "backend_health, expected",
    [
        (503, 503),  # its engine is dead, though Triton still has the model loaded
        (500, 503),  # a backend without /health whose engine is dead answers every request so
        (404, 200),  # a backend without /health whose engine lives
        (200, 200),
    ],
)
def test_health_asks_every_models_backend_whether_its_engine_lives(backend_health, expected):
    async def scenario():
        triton = StandInTriton(models=("tiny", "other"))
        triton.health["other"] = backend_health
        client = await _client(triton)
        try:
            assert (await client.get("/health")).status == expected
            assert {(m, e) for m, e, _ in triton.calls} == {("tiny", "/health"), ("other", "/health")}
        finally:
            await client.close()

    run(scenario())


@pytest.mark.parametrize(
    "path", ["/v1/responses", "/v1/messages", "/v1/messages/count_tokens", "/tokenize", "/detokenize"]
)
def test_vllm_serves_other_model_routes_each_goes_to_the_backend_of_the_model_it_names(path):
    async def scenario():
        triton = StandInTriton(models=("tiny", "other"), script={"other": [Chunk(200, b'{"ok": 1}', True)]})
        client = await _client(triton)
        try:
            response = await client.post(path, json={"model": "other"})
            assert (response.status, await response.json()) == (200, {"ok": 1})
            assert triton.calls[-1][:2] == ("other", path)
        finally:
            await client.close()

    run(scenario())


def test_a_stored_response_is_asked_of_each_models_backend_until_one_knows_it():
    async def scenario():
        missing = Chunk(404, b'{"error": {"message": "Response with id resp_1 not found."}}', True)
        events = [Chunk(200, b"event: response.created\n\n", False), Chunk(200, b"data: [DONE]\n\n", True)]
        script = {"a": [missing], "b": events, "c": [Chunk(200, b"{}", True)]}
        triton = StandInTriton(models=("a", "b", "c"), script=script)
        client = await _client(triton)
        try:
            found = await client.get("/v1/responses/resp_1", params={"stream": "true", "starting_after": "0"})
            assert (found.status, found.content_type) == (200, "text/event-stream")
            assert await found.read() == b"event: response.created\n\ndata: [DONE]\n\n"
            path = "/v1/responses/resp_1?stream=true&starting_after=0"
            asked = [call for call in triton.calls if call[1] != "/v1/models"]  # the catalog's are not in question
            assert asked == [("a", path, None), ("b", path, None)]  # c, after the answer, is not asked

            triton.calls.clear()
            triton.script = {"a": [missing], "b": [missing], "c": [missing]}
            cancelled = await client.post("/v1/responses/resp_1/cancel")
            assert (cancelled.status, await cancelled.read()) == (404, missing.body)  # the last one's, as it is
            asked = [call[:2] for call in triton.calls if call[1] != "/v1/models"]
            assert asked == [(m, "/v1/responses/resp_1/cancel") for m in "abc"]

            triton.models = []
            assert (await client.get("/v1/responses/resp_1")).status == 503
        finally:
            await client.close()

    run(scenario())


def test_version_is_the_first_ready_models_backends_and_ping_is_health():
    async def scenario():
        triton = StandInTriton(models=("a", "b"), script={"a": [Chunk(200, b'{"version": "0.32.0"}', True)]})
        client = await _client(triton)
        try:
            response = await client.get("/version")
            assert (response.status, await response.json()) == (200, {"version": "0.32.0"})
            assert triton.calls[-1] == ("a", "/version", None)
            assert (await client.get("/ping")).status == 200
            assert (await client.post("/ping")).status == 200
            triton.ready = False
            assert (await client.get("/ping")).status == 503
            triton.ready, triton.models = True, []
            assert (await client.get("/version")).status == 503
        finally:
            await client.close()

    run(scenario())


def test_a_path_or_method_the_api_lacks_is_answered_as_fastapi_answers_it():
    async def scenario():
        client = await _client(StandInTriton())
        try:
            for path in ("/v1/embeddings", "/metrics"):  # /metrics is a route only with Triton's metrics endpoint
                missing = await client.get(path)
                assert (missing.status, await missing.json()) == (404, {"detail": "Not Found"})
            wrong = await client.get("/v1/chat/completions")
            assert (wrong.status, await wrong.json()) == (405, {"detail": "Method Not Allowed"})
            assert wrong.headers["Allow"] == "POST"
            head = await client.head("/v1/models")  # vllm serve's GET routes take no HEAD
            assert (head.status, head.headers["Allow"]) == (405, "GET")
        finally:
            await client.close()

    run(scenario())


TRITON_METRICS = (
    b"# HELP nv_inference_request_success Number of successful inference requests\n"
    b'vllm:num_requests_running{model="tiny",version="1"} 2\n'
)


async def _metrics_endpoint(answers: list[web.Response | float]) -> TestServer:
    """An HTTP server on 127.0.0.1 that answers /metrics with the next of ``answers`` (a float: that many seconds'
    silence first): where the gateway reads Triton's metrics."""

    async def handler(request: web.Request) -> web.Response:
        answer = answers.pop(0)
        if isinstance(answer, float):
            await asyncio.sleep(answer)
            return web.Response(text="late")
        return answer

    app = web.Application()
    app.router.add_get("/metrics", handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


def test_metrics_are_tritons_as_they_are_and_open_without_the_api_key(monkeypatch):
    monkeypatch.setattr(gateway_app, "METRICS_TIMEOUT_S", 0.5)

    async def scenario():
        kind = "text/plain; version=0.0.4; charset=utf-8"
        answers = [web.Response(body=TRITON_METRICS, headers={"Content-Type": kind})]
        answers += [web.Response(status=500, text="no"), 2.0]
        endpoint = await _metrics_endpoint(answers)
        url = str(endpoint.make_url("/metrics"))
        client = await _client(StandInTriton(), keys=["s3cret"], metrics=url)
        try:
            served = await client.get("/metrics")
            assert (served.status, await served.read()) == (200, TRITON_METRICS)
            assert served.headers["Content-Type"] == kind
            for reason in ("answered 500", "no answer within"):
                failed = await client.get("/metrics")
                assert failed.status == 503
                message = (await failed.json())["error"]["message"]
                assert url in message and reason in message, message
            await endpoint.close()
            gone = await client.get("/metrics")
            assert gone.status == 503 and url in (await gone.json())["error"]["message"]
        finally:
            await client.close()
            await endpoint.close()

    run(scenario())


# --- --api-key --------------------------------------------------------------------------------------------------------


def test_the_api_key_guards_v1_as_vllm_serve_does():
    async def scenario():
        client = await _client(StandInTriton(), keys=["s3cret", "other"])
        try:
            assert (await client.get("/v1/models")).status == 401
            assert await (await client.get("/v1/models")).json() == {"error": "Unauthorized"}
            wrong = await client.get("/v1/models", headers={"Authorization": "Bearer nope"})
            assert wrong.status == 401
            basic = await client.get("/v1/models", headers={"Authorization": "Basic s3cret"})
            assert basic.status == 401
            for key in ("s3cret", "other"):
                assert (await client.get("/v1/models", headers={"Authorization": f"bearer {key}"})).status == 200
            assert (await client.get("/health")).status == 200  # never guarded: probes carry no key
        finally:
            await client.close()

    run(scenario())


def test_without_keys_nothing_is_guarded():
    async def scenario():
        client = await _client(StandInTriton())
        try:
            assert (await client.get("/v1/models")).status == 200
        finally:
            await client.close()

    run(scenario())
