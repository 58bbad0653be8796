"""tune's reload of a candidate through Triton's model-control API, against a stand-in for Triton's HTTP endpoint:
an unload, a wait until the index no longer says the model is there, then a load whose failure is Triton's reason;
a server that stopped ends the search."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_triton import Answer, FakeTriton, fake_triton
from vllm_repo.serve.ports import free_port
from vllm_repo.serve.triton_client import TritonHttp
from vllm_repo.tune.errors import TuneError
from vllm_repo.tune.server import ModelServer

LOAD = ("POST", "/v2/repository/models/tiny/load")
UNLOAD = ("POST", "/v2/repository/models/tiny/unload")
INDEX = ("POST", "/v2/repository/index")


class Server:
    """The TritonServer a ModelServer drives, as far as a reload asks it."""

    def __init__(self, http_url: str, running: bool = True) -> None:
        self.http_url, self.running = http_url, running

    def is_running(self) -> bool:
        return self.running

    def load_model(self, model: str, timeout: float) -> None:
        TritonHttp(self.http_url).load_model(model, timeout=timeout)

    def log_tail(self) -> str:
        return "the end of the log"

    @property
    def started(self):
        class Process:
            def poll(self) -> int:
                return 9

        return Process()


def model_server(url: str, loaded: bool, running: bool = True) -> ModelServer:
    server = ModelServer.__new__(ModelServer)
    server.model, server.loaded, server.restarts = "tiny", loaded, 0
    server.server = Server(url, running)  # type: ignore[assignment]
    return server


@pytest.fixture
def triton() -> Iterator[FakeTriton]:
    with fake_triton() as server:
        yield server


def test_a_reload_unloads_waits_for_the_unload_and_loads(triton):
    triton.answers[UNLOAD] = Answer(200)
    triton.answers[INDEX] = Answer(body=b'[{"name": "tiny", "state": "UNAVAILABLE", "reason": "unloaded"}]')
    triton.answers[LOAD] = Answer(200)
    server = model_server(triton.url, loaded=True)
    assert server.reload(timeout=10) is None and server.loaded and server.restarts == 0
    asked = [path for _, path, _ in triton.requests]
    assert asked[0].endswith("/unload") and asked[-1].endswith("/load") and "/v2/repository/index" in asked


def test_a_load_that_fails_returns_tritons_reason(triton):
    triton.answers[LOAD] = Answer(400, b'{"error": "failed to load \'tiny\': CUDA out of memory "}')
    triton.answers[INDEX] = Answer(body=b'[{"name": "tiny", "state": "UNAVAILABLE", "reason": "OOM"}]')
    server = model_server(triton.url, loaded=False)
    assert server.reload(timeout=10) == "failed to load 'tiny': CUDA out of memory"
    assert not server.loaded and server.state() == "UNAVAILABLE"


def test_a_server_that_stopped_ends_the_search_with_its_log():
    server = model_server(f"http://127.0.0.1:{free_port()}", loaded=False, running=False)
    with pytest.raises(TuneError, match=r"the Triton server stopped \(exit status 9\)") as stopped:
        server.reload(timeout=1)
    assert "the end of the log" in stopped.value.hint
