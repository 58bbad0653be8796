"""infer --wait: keep asking while a launch is still loading (nothing answers yet, or the model is not ready yet),
go ahead once the model is ready. The server here plays only Triton's readiness endpoints."""

from __future__ import annotations

import http.server
import threading

import pytest

from vllm_repo.serve.errors import InferError
from vllm_repo.serve.infer import wait_until_ready
from vllm_repo.serve.ports import free_port


def readiness_server(port: int, ready_after: int) -> tuple[http.server.HTTPServer, list[str]]:
    """Answers 400 (still loading) to the first ``ready_after`` requests, then 200 for the server and model tiny."""
    polls: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            polls.append(self.path)
            loading = len(polls) <= ready_after
            if self.path == "/v2/health/ready":
                self.send_response(400 if loading else 200)
            else:
                self.send_response(400 if loading or "/tiny/" not in self.path else 200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, polls


def test_waits_through_nothing_listening_then_loading_then_goes_ahead():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    started: list[http.server.HTTPServer] = []
    # The endpoints open only after a while, as Triton's do once its models are loaded.
    opener = threading.Timer(1.0, lambda: started.append(readiness_server(port, ready_after=2)[0]))
    opener.start()
    said: list[str] = []
    try:
        wait_until_ready(url, "tiny", wait=30, on_wait=said.append, poll=0.2)
    finally:
        opener.cancel()
        for server in started:
            server.shutdown()
    assert started and len(said) == 1 and "waiting up to 30 s" in said[0]


def test_gives_up_after_the_wait_and_says_how_to_wait_longer():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(InferError, match=r"no Triton server answers at .* after waiting 0\.5 s") as gave_up:
        wait_until_ready(url, "tiny", wait=0.5, poll=0.1)
    assert "--wait" in gave_up.value.hint


def test_a_server_done_loading_without_the_model_is_an_error_at_once():
    port = free_port()
    server, polls = readiness_server(port, ready_after=0)
    try:
        with pytest.raises(InferError, match="has no model 'other'"):
            wait_until_ready(f"http://127.0.0.1:{port}", "other", wait=30, poll=0.1)
    finally:
        server.shutdown()
    assert len([p for p in polls if p.endswith("/other/ready")]) == 1
