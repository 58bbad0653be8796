"""ENGINE_PROCESS's send thread's work (engine_link.py), in the order clients wait on it.

One thread sends every response, a round trip to the server apiece, so under load the outputs queue: at 1,024 streams
on an H100 a request's first output waited 93 ms (median) to go. What a client waits on goes first:

- a final response that waited for its request's stats (metrics_report.py): before any output still queued, even in
  the middle of a batch. It had gone to the back of the queue once its stats were reported, and so queued twice: 231 ms
  median from the engine's final output to its response at 1,024 streams against those 93 ms. A stream's client sends
  its next request only after the final, so each of those milliseconds is one the GPU could have been serving it;
- then the outputs that end a request (a final, an error) and requests' first outputs (time to first token), also in
  the middle of a batch: taken from the queue as they come, each waits for the send in progress only, where it had
  waited for the batch (at 256 streams on an H100, 17 ms for a final output to reach the stub's hold for its stats,
  20 ms for a first output to be sent: a batch's length);
- then the rest: a stream's next output waits, and vLLM merges what the engine makes meanwhile into it, so nothing is
  lost but a response.

A request's outputs keep their order. An output jumps the queue only where no output of its request is queued before
it; the engine's process sends a request's next output only once the last is sent, so only the pieces of one output
(STREAM_ONE_RESPONSE_PER_TOKEN) come together. In the queue a request is ranked by the most urgent of its outputs, and
sorting is stable.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

# An output as the engine's process sends it: (request id, output, end), ``end`` set where the request ended.
Output = tuple[str, Any, Any]

# Ranks: what ends a request, a request's first output, the rest.
ENDS, FIRST, FOLLOWING = 0, 1, 2


class SendWork:
    """The outputs queued for the send thread: those that may go at once (``urgent``), the rest (a batch at a time),
    and the final responses ready to go before either."""

    def __init__(self, rank: Callable[[str, Any, Any], int]) -> None:
        self._rank = rank
        self._ready = threading.Condition()
        self._outputs: list[tuple[Output, int]] = []
        self._queued_keys: set[str] = set()  # the requests with an output in _outputs
        self._urgent: deque[Output] = deque()
        self._finals: deque[Callable[[], None]] = deque()
        self._stopped = False

    def add_outputs(self, outputs: list[Output]) -> None:
        ranks = [self._rank(*output) for output in outputs]  # outside the lock: take() need not wait on it
        with self._ready:
            for output, rank in zip(outputs, ranks, strict=True):
                key = output[0]
                if rank < FOLLOWING and key not in self._queued_keys:
                    self._urgent.append(output)
                else:
                    self._outputs.append((output, rank))
                    self._queued_keys.add(key)
            self._ready.notify()

    def add_final(self, send: Callable[[], None]) -> None:
        """A final response whose stats are reported: sent before any output queued."""
        with self._ready:
            self._finals.append(send)
            self._ready.notify()

    def stop(self) -> None:
        """take() answers None once what is queued has been taken."""
        with self._ready:
            self._stopped = True
            self._ready.notify()

    @property
    def urgent_ready(self) -> bool:
        """Whether a final response or an urgent output waits: pop_finals() and pop_urgent() before the next send."""
        return bool(self._finals or self._urgent)

    def pop_finals(self) -> list[Callable[[], None]]:
        popped: list[Callable[[], None]] = []
        while self._finals:
            popped.append(self._finals.popleft())  # one at a time: add_final appends from another thread
        return popped

    def pop_urgent(self) -> Output | None:
        """The oldest urgent output, None where there is none. One at a time: a final may be released meanwhile."""
        try:
            return self._urgent.popleft()  # atomic: add_outputs appends from another thread
        except IndexError:
            return None

    def take(self) -> list[Output] | None:
        """The other outputs queued, most urgent first (empty where only finals or urgent outputs wait); None once
        stopped and empty."""
        with self._ready:
            while not (self._outputs or self._urgent or self._finals or self._stopped):
                self._ready.wait()
            batch, self._outputs = self._outputs, []
            self._queued_keys.clear()
            if not batch and not self._urgent and not self._finals and self._stopped:
                return None
        if len(batch) > 1:
            ranks: dict[str, int] = {}
            for (key, _, _), rank in batch:
                if rank < ranks.get(key, FOLLOWING + 1):
                    ranks[key] = rank
            batch.sort(key=lambda item: ranks[item[0][0]])
        return [output for output, _ in batch]
