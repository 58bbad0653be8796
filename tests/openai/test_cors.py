"""Cross-origin requests through the gateway (vllm_repo.serve.openai.cors), against a stand-in for Triton behind the
real aiohttp application. That the default answers equal vllm serve's is checked against the real one in
tests/openai/test_gateway_parity.py."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest
from aiohttp.test_utils import TestClient, TestServer
from typer.testing import CliRunner

import vllm_repo.serve.openai as openai_package
from tests.support.standin_triton import StandInTriton
from vllm_repo.cli import build_app
from vllm_repo.errors import UsageError
from vllm_repo.serve import launch as launch_module
from vllm_repo.serve.openai.app import OpenAIGateway
from vllm_repo.serve.openai.cors import EVERY_METHOD, CorsPolicy
from vllm_repo.serve.openai.triton import Chunk

UI = "https://ui.example"
ASKS_X_TRACE = {"Access-Control-Request-Headers": "x-trace"}
PREFLIGHT = {"Origin": UI, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}


def exchange(policy: CorsPolicy | None, *requests, keys=None, script=None) -> list:
    """(status, headers, body) for each (method, path, headers[, json]) through a gateway with ``policy``."""

    async def scenario():
        triton = StandInTriton(script=script)
        client = TestClient(TestServer(OpenAIGateway(triton, keys, cors=policy).application()))
        await client.start_server()
        try:
            answers = []
            for method, path, headers, *body in requests:
                response = await client.request(method, path, headers=headers, json=body[0] if body else None)
                answers.append((response.status, response.headers, await response.text()))
            return answers
        finally:
            await client.close()

    return asyncio.run(scenario())


def test_by_default_no_origin_is_allowed_and_answers_vary_by_origin():
    (preflight, _, refused), (listed, headers, _) = exchange(
        None, ("OPTIONS", "/v1/chat/completions", PREFLIGHT), ("GET", "/v1/models", {"Origin": UI})
    )
    assert (preflight, refused) == (400, "Disallowed CORS origin")
    assert listed == 200
    assert "Access-Control-Allow-Origin" not in headers
    assert headers["Vary"] == "Origin"


def test_any_origin_gets_a_star_on_preflights_plain_and_streamed_answers():
    stream = [Chunk(200, b"data: 1\n\n", False), Chunk(200, b"data: [DONE]\n\n", True)]
    (status, preflight, text), (_, listed, _), (_, streamed, body) = exchange(
        CorsPolicy(allowed_origins=("*",)),
        ("OPTIONS", "/v1/chat/completions", PREFLIGHT),
        ("GET", "/v1/models", {"Origin": UI}),
        ("POST", "/v1/chat/completions", {"Origin": UI}, {"model": "tiny", "stream": True}),
        script={"tiny": stream},
    )
    assert (status, text) == (200, "OK")
    assert preflight["Access-Control-Allow-Origin"] == "*"
    assert preflight["Access-Control-Allow-Headers"] == "authorization"  # every header: the asked ones, named back
    assert preflight["Access-Control-Allow-Methods"] == ", ".join(EVERY_METHOD)
    assert preflight["Access-Control-Max-Age"] == "600"
    assert "Access-Control-Allow-Credentials" not in preflight
    assert listed["Access-Control-Allow-Origin"] == "*"
    assert streamed["Access-Control-Allow-Origin"] == "*"
    assert body == "data: 1\n\ndata: [DONE]\n\n"


def test_named_origins_with_credentials_are_named_back_and_others_are_not():
    policy = CorsPolicy(allowed_origins=(UI,), allow_credentials=True)
    other = "https://elsewhere.example"
    (ok, allowed, _), (refused, _, why), (_, plain, _), (_, foreign, _) = exchange(
        policy,
        ("OPTIONS", "/v1/completions", PREFLIGHT),
        ("OPTIONS", "/v1/completions", {**PREFLIGHT, "Origin": other}),
        ("GET", "/v1/models", {"Origin": UI}),
        ("GET", "/v1/models", {"Origin": other}),
    )
    assert ok == 200 and allowed["Access-Control-Allow-Origin"] == UI
    assert allowed["Access-Control-Allow-Credentials"] == "true"
    assert (refused, why) == (400, "Disallowed CORS origin")
    assert plain["Access-Control-Allow-Origin"] == UI and plain["Access-Control-Allow-Credentials"] == "true"
    assert plain["Vary"] == "Origin"
    assert "Access-Control-Allow-Origin" not in foreign


def test_methods_and_headers_outside_the_lists_are_refused_by_name():
    policy = CorsPolicy(allowed_origins=("*",), allowed_methods=("POST",), allowed_headers=("Authorization",))
    (status, headers, why), (fine, _, _) = exchange(
        policy,
        (
            "OPTIONS",
            "/v1/models",
            {**PREFLIGHT, "Access-Control-Request-Method": "GET", "Access-Control-Request-Headers": "x-trace"},
        ),
        ("OPTIONS", "/v1/models", {**PREFLIGHT, "Access-Control-Request-Headers": "content-type, authorization"}),
    )
    assert (status, why) == (400, "Disallowed CORS method, headers")
    assert headers["Access-Control-Allow-Methods"] == "POST"
    assert (
        headers["Access-Control-Allow-Headers"]
        == "Accept, Accept-Language, Authorization, Content-Language, Content-Type"
    )
    assert fine == 200


def test_preflights_need_no_api_key_and_a_refused_key_carries_no_cors_headers():
    (preflight, _, _), (refused, headers, _) = exchange(
        CorsPolicy(allowed_origins=("*",)),
        ("OPTIONS", "/v1/chat/completions", PREFLIGHT),
        ("GET", "/v1/models", {"Origin": UI}),
        keys=["s3cret"],
    )
    assert preflight == 200
    assert refused == 401
    assert "Access-Control-Allow-Origin" not in headers and "Vary" not in headers


@pytest.mark.parametrize(
    ("raw", "fragment"), [("[1", "is not JSON"), ('"*"', "is not a list of strings"), ("[1]", "is not a list")]
)
def test_a_bad_list_is_a_usage_error_naming_the_option(raw, fragment):
    with pytest.raises(UsageError) as caught:
        CorsPolicy.from_options(allowed_origins=raw)
    assert "--allowed-origins" in str(caught.value) and fragment in str(caught.value)
    assert "'[\"*\"]'" in caught.value.hint


def test_launch_hands_its_policy_to_the_gateway_and_openai_reads_it_back(monkeypatch):
    policy = CorsPolicy.from_options('["https://ui.example"]', True, '["GET", "POST"]', '["Authorization"]')
    started = []
    monkeypatch.setattr(launch_module.subprocess, "Popen", lambda command, **kw: started.append(command))
    plan = SimpleNamespace(
        host="127.0.0.1", grpc_port=8001, metrics_port=18002, openai_port=9000, openai_api_keys=[], openai_cors=policy
    )
    launch_module.start_openai_gateway(plan)
    argv = started[0][started[0].index("openai") + 1 :]

    seen = {}
    monkeypatch.setattr(openai_package, "run_gateway", lambda *a, **kw: seen.update(kw) or 0)
    result = CliRunner().invoke(build_app(), ["openai", *argv])
    assert result.exit_code == 0, result.output
    assert seen["cors"] == policy
    assert seen["metrics"] == "http://127.0.0.1:18002/metrics"  # launch's own metrics port, not Triton's default
    assert json.loads(argv[argv.index("--allowed-origins") + 1]) == ["https://ui.example"]
