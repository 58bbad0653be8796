"""The OpenAI API's tests: the gateway's own logic against stand-ins for Triton (test_gateway, test_cors,
test_shared_stream, test_stream_socket), launch --openai-port end to end (test_gateway_e2e), and the gateway against
vLLM's own server (test_reference, test_parity, test_gateway_parity). The backend's OpenAI layer is tested with the
backend (tests/backend/test_openai_backend.py), openai.json's rules with validate's.

Session fixtures: vLLM's own OpenAI server on the tiny model (bench/lib/reference_server.py).

A gateway-vs-reference test in this folder asks for ``reference_server`` (or ``reference_url``) and serves
``tiny_model`` (tests/conftest.py) through Triton: the same directory on both sides, since /v1/models names it
(``root``), with ``tiny_lora`` as the adapter ADAPTER on both."""

from __future__ import annotations

import pytest

from bench.lib.reference_server import TOOL_ARGS, ReferenceServer
from tests.support.openai_parity import ADAPTER
from tests.support.serving import SERVING_PYTHON


@pytest.fixture(scope="session")
def reference_server(tiny_model, tiny_lora, tmp_path_factory):
    """vLLM's api_server on the tiny model, ready; stopped (its whole process group) at the end of the session."""
    # The engine arguments enable LoRA: the adapter is served too, as the backend serves multi_lora.json's.
    adapter = ("--lora-modules", f"{ADAPTER}={tiny_lora}")
    server = ReferenceServer(
        SERVING_PYTHON,
        tiny_model,
        log_path=tmp_path_factory.mktemp("openai-logs") / "api_server.log",
        extra_args=(*TOOL_ARGS, *adapter),
    )
    with server:
        server.wait_ready(timeout=600)
        yield server


@pytest.fixture(scope="session")
def reference_url(reference_server) -> str:
    """The reference's OpenAI base URL, http://127.0.0.1:PORT/v1."""
    return reference_server.base_url
