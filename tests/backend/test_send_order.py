"""The order ENGINE_PROCESS's send thread sends in (send_order.py), without Triton: what ends a request and first
outputs jump the queue, the rest goes a batch at a time, each request's outputs in their order; final responses ready
apart from the outputs."""

from __future__ import annotations

import threading

from tests.support.waiting import wait_for
from vllm_repo.backend.vllm_repo_backend import send_order

RANKS = {"middle": send_order.FOLLOWING, "first": send_order.FIRST, "final": send_order.ENDS}


def work() -> send_order.SendWork:
    return send_order.SendWork(lambda key, output, end: send_order.ENDS if end is not None else RANKS[output])


def urgent(queue: send_order.SendWork) -> list:
    popped = []
    while (output := queue.pop_urgent()) is not None:
        popped.append(output)
    return popped


def test_ends_and_first_outputs_jump_the_queue_unless_their_request_has_an_output_queued():
    queue = work()
    queue.add_outputs([("a", "middle", None), ("b", "first", None), ("c", "middle", None)])
    queue.add_outputs([("d", None, ("aborted", "INTERNAL")), ("a", "final", None), ("e", "middle", None)])
    assert queue.urgent_ready
    assert urgent(queue) == [("b", "first", None), ("d", None, ("aborted", "INTERNAL"))]
    assert queue.take() == [
        ("a", "middle", None),  # a ends in this batch: all of it goes first, its middle before its final
        ("a", "final", None),
        ("c", "middle", None),
        ("e", "middle", None),
    ]
    assert not queue.urgent_ready


def test_the_pieces_of_one_output_keep_their_order():
    # STREAM_ONE_RESPONSE_PER_TOKEN: one output's pieces come together; the first may go at once, the rest follow it.
    queue = work()
    queue.add_outputs([("s", "first", None), ("s", "middle", None), ("s", "final", None)])
    assert urgent(queue) == [("s", "first", None)]
    assert queue.take() == [("s", "middle", None), ("s", "final", None)]
    # Once the batch is taken its requests are no longer queued: the next output of one may jump again.
    queue.add_outputs([("s", "final", None)])
    assert urgent(queue) == [("s", "final", None)]


def test_finals_ready_are_taken_apart_and_take_waits_for_work_and_ends_after_stop():
    queue = work()
    sent: list[str] = []
    queue.add_final(lambda: sent.append("x"))
    queue.add_final(lambda: sent.append("y"))
    assert queue.urgent_ready and queue.take() == []  # only finals: take() returns for them
    for send in queue.pop_finals():
        send()
    assert sent == ["x", "y"] and not queue.urgent_ready and queue.pop_finals() == []
    taken: list = []
    waiter = threading.Thread(target=lambda: taken.append(queue.take()))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # nothing queued: it waits
    queue.add_outputs([("a", "middle", None)])
    wait_for(lambda: taken == [[("a", "middle", None)]])
    taken.clear()
    waiter = threading.Thread(target=lambda: taken.append(queue.take()))
    waiter.start()
    queue.add_outputs([("z", "first", None)])
    wait_for(lambda: taken == [[]])  # an urgent output wakes it too; it is popped apart
    assert urgent(queue) == [("z", "first", None)]
    queue.add_outputs([("b", "middle", None)])
    queue.stop()
    assert queue.take() == [("b", "middle", None)]  # what was queued before stop() still goes
    assert queue.take() is None
