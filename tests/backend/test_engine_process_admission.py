"""ENGINE_PROCESS's admission, without Triton or vLLM: with few requests in flight and none queued for the admission
thread, execute() reads and posts its requests itself (a lone stream's first token does not wait for a thread
hand-off); from ADMIT_IN_EXECUTE_BELOW requests in flight on, or while the admission thread has requests still to
read, they go to that thread, in order."""

from __future__ import annotations

import threading

import pytest

from tests.support.waiting import wait_for
from vllm_repo.backend.vllm_repo_backend import engine_link


class Request:
    def __init__(self, name: str) -> None:
        self.name = name

    def get_response_sender(self) -> str:
        return f"sender of {self.name}"


@pytest.fixture
def engine():
    made = engine_link.ProcessEngine("m", "/nonexistent", None, False)  # type: ignore[arg-type]
    made.admitted = []  # type: ignore[attr-defined]
    made.gate = threading.Event()  # type: ignore[attr-defined]
    made.gate.set()  # type: ignore[attr-defined]

    def admit(request: Request, sender: str) -> None:
        if threading.current_thread().name == "vllm-admit":
            assert made.gate.wait(10)  # type: ignore[attr-defined]
        made.admitted.append((request.name, sender, threading.current_thread().name))  # type: ignore[attr-defined]

    made._admit = admit  # type: ignore[method-assign]
    thread = threading.Thread(target=made._admit_loop, name="vllm-admit", daemon=True)
    thread.start()
    yield made
    made.gate.set()  # type: ignore[attr-defined]
    made._admissions.put(None)
    thread.join(10)


def test_with_few_requests_in_flight_execute_admits_them_itself(engine):
    engine.execute([Request("a"), Request("b")])
    main = threading.current_thread().name
    assert engine.admitted == [("a", "sender of a", main), ("b", "sender of b", main)]  # before execute() returned


def test_from_the_threshold_on_the_admission_thread_reads_them(engine):
    engine.live = {f"r{i}": object() for i in range(engine_link.ADMIT_IN_EXECUTE_BELOW)}
    engine.execute([Request("a")])
    wait_for(lambda: len(engine.admitted) == 1)
    assert engine.admitted == [("a", "sender of a", "vllm-admit")]
    # Below it again, and the admission thread done: execute() admits itself once more.
    engine.live.clear()
    wait_for(lambda: engine._queued_admissions == 0)
    engine.execute([Request("b")])
    assert engine.admitted[-1] == ("b", "sender of b", threading.current_thread().name)


def test_while_the_admission_thread_has_requests_to_read_later_ones_queue_behind_them(engine):
    engine.live = {f"r{i}": object() for i in range(engine_link.ADMIT_IN_EXECUTE_BELOW)}
    engine.gate.clear()  # the admission thread is slow to read "a"
    engine.execute([Request("a")])
    engine.live.clear()  # few in flight now, but "a" is not read yet: "b" must not pass it
    engine.execute([Request("b")])
    assert engine.admitted == []
    engine.gate.set()
    wait_for(lambda: len(engine.admitted) == 2)
    assert [(name, thread) for name, _, thread in engine.admitted] == [("a", "vllm-admit"), ("b", "vllm-admit")]
