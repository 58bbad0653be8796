"""Session fixtures: the tiny model and vLLM's own OpenAI server on it (tests/openai/reference.py).

A gateway-vs-reference test in this folder asks for ``reference_server`` (or ``reference_url``) and serves
``reference_model_dir`` through Triton: the same directory on both sides, since /v1/models names it (``root``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.openai.reference import TOOL_ARGS, ReferenceServer, build_tiny_model
from tests.serving_env import SERVING_PYTHON, SERVING_SKIP_REASON

# A LoRA adapter of the tiny model, beside it: served by name on both sides of the parity test.
ADAPTER = "tiny-adapter"


@pytest.fixture(scope="session")
def reference_model_dir(tmp_path_factory) -> Path:
    if not SERVING_PYTHON:
        pytest.skip(SERVING_SKIP_REASON)
    work = tmp_path_factory.mktemp("openai-model")
    return build_tiny_model(SERVING_PYTHON, work / "tiny-llama", lora=work / ADAPTER)


@pytest.fixture(scope="session")
def reference_server(reference_model_dir, tmp_path_factory):
    """vLLM's api_server on the tiny model, ready; stopped (its whole process group) at the end of the session."""
    # The engine arguments enable LoRA: the adapter is served too, as the backend serves multi_lora.json's.
    adapter = ("--lora-modules", f"{ADAPTER}={reference_model_dir.parent / ADAPTER}")
    server = ReferenceServer(
        SERVING_PYTHON,
        reference_model_dir,
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
