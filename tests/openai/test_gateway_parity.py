"""The OpenAI API through `vllm-repo launch --openai-port` (Triton, the bundled backend, vLLM on the CPU) answers
the parity request list exactly as vLLM's own OpenAI server does on the same model directory and engine arguments:
texts, token ids and logprobs, token counts, finish reasons, tool calls, the fields present, error statuses and
bodies. Only ids, timestamps and system_fingerprint may differ (tests/support/openai_parity.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bench.lib.reference_server import TOOL_ARGS
from bench.lib.tiny import tiny_engine_args
from tests.support.launch import start_launch, stop_and_check
from tests.support.openai_parity import ADAPTER, REQUESTS, compare, run_all
from tests.support.serving import needs_serving
from vllm_repo.scaffold import init_model
from vllm_repo.serve.ports import free_port

pytestmark = [needs_serving, pytest.mark.e2e]


def openai_json_for(args: tuple[str, ...]) -> dict:
    """vllm serve's frontend flags as openai.json keys: --enable-auto-tool-choice --tool-call-parser hermes."""
    options, rest = {}, list(args)
    while rest:
        flag = rest.pop(0).removeprefix("--").replace("-", "_")
        options[flag] = rest.pop(0) if rest and not rest[0].startswith("--") else True
    return options


@pytest.fixture(scope="module")
def gateway_url(tiny_model: Path, tiny_lora: Path, tmp_path_factory):
    repo = tmp_path_factory.mktemp("parity") / "model_repository"
    engine = tiny_engine_args(tiny_model)
    init_model(repo, str(tiny_model), name="tiny", settings=engine, loras={ADAPTER: str(tiny_lora)})
    version = repo / "tiny" / "1"
    # Exactly the reference's engine arguments, nothing init chose besides.
    (version / "model.json").write_text(json.dumps(engine, indent=2))
    (version / "openai.json").write_text(json.dumps(openai_json_for(TOOL_ARGS)))
    port = free_port()
    # The reference runs its engine core in-process; so does this engine.
    launched = start_launch(repo, "--openai-port", str(port), env={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    yield f"http://127.0.0.1:{port}/v1"
    stop_and_check(launched, port)


def test_openai_json_spells_the_references_flags():
    assert openai_json_for(TOOL_ARGS) == {"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}


def test_the_gateway_answers_every_request_as_vllm_serve_does(reference_url, gateway_url):
    reference = run_all(reference_url)
    through_triton = run_all(gateway_url)
    assert [o.name for o in through_triton] == [r.name for r in REQUESTS]
    assert compare(reference, through_triton) == []


# A page at another origin asking, then calling: vllm serve's default (no --allowed-origins) refuses the origin.
CORS_REQUESTS = [
    (
        "OPTIONS",
        "/chat/completions",
        {
            "Origin": "https://ui.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    ),
    ("OPTIONS", "/models", {"Origin": "https://ui.example", "Access-Control-Request-Method": "TRACE"}),
    ("GET", "/models", {"Origin": "https://ui.example"}),
]


def cors_answer(base_url: str, method: str, path: str, headers: dict) -> tuple:
    """The status, the CORS headers and Vary, and a preflight's text."""
    request = urllib.request.Request(base_url + path, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, got, body = response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        status, got, body = exc.code, exc.headers, exc.read()
    kept = {k.lower(): v for k, v in got.items() if k.lower().startswith("access-control-") or k.lower() == "vary"}
    return status, kept, body.decode() if method == "OPTIONS" else None


def test_pages_of_other_origins_get_vllm_serves_cors_answers(reference_url, gateway_url):
    for method, path, headers in CORS_REQUESTS:
        expected = cors_answer(reference_url, method, path, headers)
        # What is compared is CORS's answer, not a 405 for the method.
        if method == "OPTIONS":
            assert expected[0] == 400 and expected[2].startswith("Disallowed CORS origin"), expected
        else:
            assert expected[1].get("vary") == "Origin", expected
        assert cors_answer(gateway_url, method, path, headers) == expected, (method, path)
