"""tune's reload of a candidate through Triton's model-control API, against a stand-in for Triton's HTTP endpoint:
an unload, a wait until the index no longer says the model is there, then a load whose failure is Triton's reason;
a server that stopped ends the search; a load that hangs is tried once more on a new server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.fake_triton import Answer, FakeTriton, fake_triton
from vllm_repo.serve.errors import TritonLoadHung
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


class HangingServer(Server):
    """A server whose loads hang (load_hang.py) as many times as ``hangs`` says, counted across the servers made."""

    def __init__(self, http_url: str, hangs: list[int], made: list[HangingServer]) -> None:
        super().__init__(http_url)
        self.hangs, self.stopped, self.starts = hangs, False, 0
        made.append(self)

    def load_model(self, model: str, timeout: float) -> None:
        if self.hangs[0] > 0:
            self.hangs[0] -= 1
            raise TritonLoadHung("Triton has not finished loading 'tiny' 90 s after its backend said it was ready")
        super().load_model(model, timeout)

    def start(self) -> None:
        self.starts += 1

    def wait_ready(self, timeout: float) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True


def hanging_model_server(url: str, hangs: int) -> tuple[ModelServer, list[HangingServer]]:
    made: list[HangingServer] = []
    left = [hangs]
    server = model_server(url, loaded=False)
    server.server = HangingServer(url, left, made)  # type: ignore[assignment]
    server._new_server = lambda: HangingServer(url, left, made)  # type: ignore[method-assign]
    return server, made


def test_a_load_that_hangs_is_loaded_again_on_a_new_server(triton):
    triton.answers[LOAD] = Answer(200)
    server, made = hanging_model_server(triton.url, hangs=1)
    assert server.reload(timeout=10) is None and server.loaded and server.restarts == 1
    first, second = made
    assert first.stopped and not second.stopped and second.starts == 1 and server.server is second
    assert [path for _, path, _ in triton.requests] == ["/v2/repository/models/tiny/load"]  # the second server's


def test_a_load_that_hangs_twice_fails_the_candidate_and_leaves_a_new_server(triton):
    server, made = hanging_model_server(triton.url, hangs=2)
    reason = server.reload(timeout=10)
    assert reason is not None and "has not finished loading 'tiny'" in reason and "again on a new server" in reason
    assert not server.loaded and server.restarts == 2
    assert [s.stopped for s in made] == [True, True, False] and server.server is made[2] and made[2].starts == 1
