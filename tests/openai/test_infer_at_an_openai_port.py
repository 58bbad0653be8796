"""`vllm-repo infer` pointed at an OpenAI API (here vLLM's own server, which answers Triton's routes with FastAPI's
404 as the gateway does) says what it reached and which port to give instead."""

from __future__ import annotations

import pytest

from vllm_repo.serve.errors import InferError
from vllm_repo.serve.infer import infer

pytestmark = pytest.mark.e2e


def test_infer_at_an_openai_port_names_it_and_points_at_tritons(reference_url):
    root = reference_url.removesuffix("/v1")  # what a user passes: the server, as for Triton
    with pytest.raises(InferError) as caught:
        infer("tiny", "Hello", url=root, max_tokens=2)
    assert caught.value.message.startswith(f"{root} is the OpenAI API, not Triton's HTTP endpoint")
    assert "Triton's HTTP port" in caught.value.hint and f"{root}/v1/completions" in caught.value.hint
