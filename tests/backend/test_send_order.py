"""The order ENGINE_PROCESS's send thread sends in (send_order.py), without Triton: what ends a request first, then
first outputs, then the rest, each request's outputs in their order; final responses ready apart from the outputs."""

from __future__ import annotations

import threading

from tests.support.waiting import wait_for
from vllm_repo.backend.vllm_repo_backend import send_order

RANKS = {"middle": send_order.FOLLOWING, "first": send_order.FIRST, "final": send_order.ENDS}


def work() -> send_order.SendWork:
    return send_order.SendWork(lambda key, output, end: send_order.ENDS if end is not None else RANKS[output])


def test_what_ends_a_request_goes_first_then_first_outputs_each_requests_order_kept():
    queue = work()
    queue.add_outputs([("a", "middle", None), ("b", "first", None), ("c", "middle", None)])
    queue.add_outputs([("d", None, ("aborted", "INTERNAL")), ("a", "final", None), ("e", "middle", None)])
    batch = queue.take()
    assert batch == [
        ("a", "middle", None),  # a ends in this batch: all of it goes first, its middle before its final
        ("d", None, ("aborted", "INTERNAL")),
        ("a", "final", None),
        ("b", "first", None),
        ("c", "middle", None),
        ("e", "middle", None),
    ]


def test_finals_ready_are_taken_apart_and_take_waits_for_work_and_ends_after_stop():
    queue = work()
    sent: list[str] = []
    queue.add_final(lambda: sent.append("x"))
    queue.add_final(lambda: sent.append("y"))
    assert queue.finals_ready and queue.take() == []  # only finals: take() returns for them
    for send in queue.pop_finals():
        send()
    assert sent == ["x", "y"] and not queue.finals_ready and queue.pop_finals() == []
    taken: list = []
    waiter = threading.Thread(target=lambda: taken.append(queue.take()))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # nothing queued: it waits
    queue.add_outputs([("a", "first", None)])
    wait_for(lambda: taken == [[("a", "first", None)]])
    queue.add_outputs([("b", "middle", None)])
    queue.stop()
    assert queue.take() == [("b", "middle", None)]  # what was queued before stop() still goes
    assert queue.take() is None
