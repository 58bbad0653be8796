"""ENGINE_PROCESS's send thread, without Triton or vLLM: a turn's responses go out in order, the engine's process is
told which requests may read on, and a final response held for its stats goes out from the send thread (not the
metrics thread), also when the model unloads; and a send that failed because the client cancelled aborts its request
as a cancellation (both shapes)."""

from __future__ import annotations

import threading
import time
import types
from typing import Any

import pytest

from tests.support.waiting import wait_for
from vllm_repo.backend.vllm_repo_backend import engine_link, jobs, metrics, native, sends, stub

FINAL = 1


class Sender:
    """A response sender whose send is a round trip that lets the GIL go, as the stub's does."""

    def __init__(self, log: list, in_flight: list[int], lock: threading.Lock) -> None:
        self.log, self.in_flight, self.lock = log, in_flight, lock

    def send(self, response: Any, flags: int = 0) -> None:
        with self.lock:
            self.in_flight[0] += 1
            self.in_flight[1] = max(self.in_flight[1], self.in_flight[0])
        time.sleep(0.003)
        with self.lock:
            self.in_flight[0] -= 1
            self.log.append((threading.current_thread().name, response, flags))


class Conn:
    def __init__(self) -> None:
        self.messages: list[tuple] = []

    def send(self, message: tuple) -> None:
        self.messages.append(message)

    def close(self) -> None:
        pass


@pytest.fixture
def engine(monkeypatch):
    logged: list[str] = []
    logger = types.SimpleNamespace(log_info=logged.append, log_warn=logged.append, log_error=logged.append)
    pb_utils = types.SimpleNamespace(TRITONSERVER_RESPONSE_COMPLETE_FINAL=FINAL, Logger=logger)
    monkeypatch.setattr(stub, "pb_utils", pb_utils)
    monkeypatch.setattr(sends, "native_response", lambda options, output, first: (output.key, output.index, first))
    made = engine_link.ProcessEngine("m", "/nonexistent", None, False)  # type: ignore[arg-type]
    made.conn = Conn()
    made.child = types.SimpleNamespace(wait=lambda timeout=None: 0, poll=lambda: 0)
    made._dir = "/nonexistent"
    made.log, made.in_flight, made.lock = [], [0, 0], threading.Lock()
    made._start_send_thread()
    yield made
    made._send_work.stop()


def start(engine: engine_link.ProcessEngine, key: str) -> jobs.Job:
    sender = Sender(engine.log, engine.in_flight, engine.lock)  # type: ignore[attr-defined]
    job = jobs.Job(None, sender, key, {}, None, None, native.OutputOptions(stream=True, prepend_prompt=False))
    engine.live[key] = job
    return job


def output(key: str, index: int, finished: bool = False) -> Any:
    return types.SimpleNamespace(key=key, index=index, finished=finished)


def test_a_turns_responses_go_out_in_order_from_the_send_thread_and_the_engine_is_told_which_may_read_on(engine):
    keys = [f"r{i}" for i in range(32)]
    for key in keys:
        start(engine, key)
    # Three turns, each with every request's next output; the engine's process waits for "sent" between them.
    for index in range(3):
        engine._send_work.add_outputs([(key, output(key, index, finished=index == 2), None) for key in keys])
        wait_for(lambda expected=32 * (index + 1): len(engine.log) == expected)
    by_key: dict[str, list[tuple[str, int, bool, int]]] = {}
    for thread, (key, index, first), flags in engine.log:
        by_key.setdefault(key, []).append((thread, index, first, flags))
    for sent in by_key.values():
        assert [index for _, index, _, _ in sent] == [0, 1, 2]
        assert [first for _, _, first, _ in sent] == [True, False, False]
        assert [flags for *_, flags in sent] == [0, 0, FINAL]
    assert {thread for thread, *_ in engine.log} == {"vllm-sends"}
    assert engine.in_flight[1] == 1  # one round trip at a time: a request's next output waits, and merges, meanwhile
    told = [key for kind, sent in engine.conn.messages if kind == "sent" for key in sent]
    assert sorted(told) == sorted(keys * 2)  # after the first two turns; the final ends the request
    assert engine.live == {} and engine.sends == 96


def test_a_final_held_for_its_stats_goes_out_from_its_requests_send_thread_and_at_unload(engine):
    engine.accumulator = metrics.MetricsAccumulator()
    held, released = start(engine, "held"), start(engine, "released")
    for job in (held, released):
        engine.accumulator.expect(job.request_id, 1)
    engine._send_work.add_outputs([("released", output("released", 0), None), ("held", output("held", 0), None)])
    wait_for(lambda: len(engine.log) == 2)
    engine._send_work.add_outputs(
        [("released", output("released", 1, True), None), ("held", output("held", 1, True), None)]
    )
    wait_for(lambda: "released" not in engine.live and "held" not in engine.live)
    assert len(engine.log) == 2  # both finals wait for their stats
    # The stats of one request come; the metrics thread (here: this one) hands its final to its send thread.
    engine.accumulator.merge({**engine.accumulator.take(), "finished_ids": ["released"]})
    for send in engine.accumulator.take()["ready_finals"]:
        send()
    wait_for(lambda: len(engine.log) == 3)
    thread, (key, index, _), flags = engine.log[-1]
    assert (key, index, flags) == ("released", 1, FINAL)
    assert thread == "vllm-sends"  # not the metrics thread: it goes on reporting
    # Unloading: the final still held goes out, from the send thread, before finalize returns.
    engine.metrics = types.SimpleNamespace(stop=lambda: [send() for send in _release(engine.accumulator)])
    engine._admissions = types.SimpleNamespace(put=lambda item: None)
    engine.finalize()
    assert engine.log[-1][1][:2] == ("held", 1) and engine.log[-1][2] == FINAL
    assert engine.log[-1][0] == "vllm-sends"


class GatedSender(Sender):
    """A sender whose send waits until the test opens the gate."""

    def __init__(self, engine: engine_link.ProcessEngine, gate: threading.Event) -> None:
        super().__init__(engine.log, engine.in_flight, engine.lock)  # type: ignore[attr-defined]
        self.gate = gate

    def send(self, response: Any, flags: int = 0) -> None:
        with self.lock:
            self.in_flight[0] += 1
        self.gate.wait(10)
        with self.lock:
            self.in_flight[0] -= 1
        super().send(response, flags)


def test_a_final_whose_stats_are_reported_goes_before_the_outputs_still_queued(engine):
    engine.accumulator = metrics.MetricsAccumulator()
    done = start(engine, "done")
    engine.accumulator.expect(done.request_id, 1)
    engine._send_work.add_outputs([("done", output("done", 0, True), None)])
    wait_for(lambda: "done" not in engine.live)  # held for its stats
    gate = threading.Event()
    keys = [f"r{i}" for i in range(20)]
    for key in keys:
        start(engine, key).first = False  # later outputs: a batch
    engine.live["r0"].sender = GatedSender(engine, gate)
    engine._send_work.add_outputs([(key, output(key, 1), None) for key in keys])
    wait_for(lambda: engine.in_flight[0] == 1)  # r0's send is under way, the other 19 queued
    engine.accumulator.merge({**engine.accumulator.take(), "finished_ids": ["done"]})
    for send in engine.accumulator.take()["ready_finals"]:
        send()  # as the metrics thread does once the stats are reported
    gate.set()
    wait_for(lambda: len(engine.log) == 21)
    assert [response[0] for _, response, _ in engine.log] == ["r0", "done", *keys[1:]]


def test_a_first_output_and_a_final_that_come_mid_batch_wait_only_for_the_send_under_way(engine):
    # At a few hundred streams a batch takes milliseconds: a request's first output (time to first token) and a final
    # output (held for its stats from then on) that come meanwhile go after the send in progress, not after the batch.
    gate = threading.Event()
    keys = [f"r{i}" for i in range(20)]
    for key in keys:
        start(engine, key).first = False
    engine.live["r0"].sender = GatedSender(engine, gate)
    engine._send_work.add_outputs([(key, output(key, 1), None) for key in keys])
    wait_for(lambda: engine.in_flight[0] == 1)  # r0's send is under way, the other 19 queued
    start(engine, "new")
    start(engine, "ending").first = False
    engine._send_work.add_outputs([("new", output("new", 0), None), ("ending", output("ending", 5, True), None)])
    gate.set()
    wait_for(lambda: len(engine.log) == 22)
    assert [response[:2] for _, response, _ in engine.log] == [
        ("r0", 1),
        ("new", 0),
        ("ending", 5),
        *[(key, 1) for key in keys[1:]],
    ]
    assert engine.log[2][2] == FINAL and "ending" not in engine.live


def test_the_engine_is_told_which_requests_may_read_on_in_chunks_of_a_large_batch(engine):
    keys = [f"r{i}" for i in range(engine_link.SENT_CHUNK + 6)]
    for key in keys:
        start(engine, key)
    engine._send_work.add_outputs([(key, output(key, 0), None) for key in keys])
    wait_for(lambda: sum(len(sent) for kind, sent in engine.conn.messages if kind == "sent") == len(keys))
    told = [sent for kind, sent in engine.conn.messages if kind == "sent"]
    assert [len(sent) for sent in told] == [engine_link.SENT_CHUNK, 6]
    assert [key for sent in told for key in sent] == keys


def _release(accumulator: metrics.MetricsAccumulator) -> list:
    accumulator.release_held()
    return accumulator.take()["ready_finals"]


class CancelAsking:
    def __init__(self, cancelled: bool) -> None:
        self.cancelled = cancelled

    def is_cancelled(self) -> bool:
        return self.cancelled


def test_a_send_that_failed_because_the_client_cancelled_aborts_as_a_cancellation():
    options = native.OutputOptions(stream=True, prepend_prompt=False)
    cancelled = jobs.Job(None, CancelAsking(True), "r1", {}, None, None, options)
    gone = jobs.Job(None, CancelAsking(False), "r2", {}, None, None, options)
    assert jobs.send_failure_reason(cancelled) == "request was cancelled"
    assert jobs.send_failure_reason(gone) == "the response could not be sent"
    cancelled.finished = True  # a finished request's factory is never asked (Triton freed it)
    assert jobs.send_failure_reason(cancelled) == "the response could not be sent"
