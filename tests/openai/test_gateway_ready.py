"""End to end: when `vllm-repo launch --openai-port` says ready, the OpenAI API serves.

A client that polls the gateway while the model loads (a script waiting for the API) must not push the gateway's
connection to Triton into a long back-off, and the first request after the ready line must not wait for vLLM's
OpenAI layer to be built: the model here has no openai.json, so only the gateway being in use builds it at load.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from tests.support.launch import READY_TIMEOUT, start_launch, stop_and_check
from tests.support.serving import NEEDS_SERVING
from vllm_repo.scaffold import init_model
from vllm_repo.serve.ports import free_port

pytestmark = [NEEDS_SERVING, pytest.mark.e2e]


def _status(url: str, body: dict | None = None) -> int:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return 0  # not listening yet


def test_the_gateway_serves_the_moment_launch_says_ready(tiny_model, tmp_path):
    repo = tmp_path / "model_repository"
    settings = {"enforce_eager": True, "dtype": "float32"}
    init_model(repo, str(tiny_model), name="tiny", max_model_len=512, settings=settings)
    assert not list(repo.glob("tiny/*/openai.json"))
    port = free_port()
    log = tmp_path / "server.log"
    launched = start_launch(repo, "--openai-port", str(port), "--log-file", str(log), wait_ready=False)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        polled: set[int] = set()
        while "Triton is ready" not in launched.output:
            assert launched.proc.poll() is None and time.monotonic() < deadline, launched.output
            polled.add(_status(f"{base}/v1/models"))
            time.sleep(0.2)
        ready = time.monotonic()
        # Polled while the model loaded: the gateway was up and said Triton was not (yet) there.
        assert 503 in polled, polled
        # Built while the model loaded, before any OpenAI request came.
        assert "vLLM's OpenAI layer built" in log.read_text()
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
        assert _status(f"{base}/v1/chat/completions", chat) == 200
        print(f"first chat answered {time.monotonic() - ready:.2f} s after the ready line")
        assert _status(f"{base}/health") == 200
    finally:
        stop_and_check(launched, port)
