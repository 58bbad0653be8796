"""ENGINE_PROCESS's send thread's work (engine_link.py), in the order clients wait on it.

One thread sends every response, a round trip to the server apiece, so under load the outputs queue: at 1,024 streams
on an H100 a request's first output waited 93 ms (median) to go. What a client waits on goes first:

- a final response that waited for its request's stats (metrics_report.py): before any output still queued, even in
  the middle of a batch. It had gone to the back of the queue once its stats were reported, and so queued twice: 231 ms
  median from the engine's final output to its response at 1,024 streams against those 93 ms. A stream's client sends
  its next request only after the final, so each of those milliseconds is one the GPU could have been serving it;
- then the outputs that end a request (a final, an error), then requests' first outputs (time to first token), then
  the rest: a stream's next output waits, and vLLM merges what the engine makes meanwhile into it, so nothing is lost
  but a response.

A request's outputs keep their order: it is ranked by the most urgent of its outputs queued, and sorting is stable.
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
    """The outputs queued for the send thread, and the final responses ready to go before them."""

    def __init__(self, rank: Callable[[str, Any, Any], int]) -> None:
        self._rank = rank
        self._ready = threading.Condition()
        self._outputs: list[Output] = []
        self._finals: deque[Callable[[], None]] = deque()
        self._stopped = False

    def add_outputs(self, outputs: list[Output]) -> None:
        with self._ready:
            self._outputs.extend(outputs)
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
    def finals_ready(self) -> bool:
        return bool(self._finals)

    def pop_finals(self) -> list[Callable[[], None]]:
        popped: list[Callable[[], None]] = []
        while self._finals:
            popped.append(self._finals.popleft())  # one at a time: add_final appends from another thread
        return popped

    def take(self) -> list[Output] | None:
        """Every output queued, most urgent first (empty where only finals are ready); None once stopped and empty."""
        with self._ready:
            while not (self._outputs or self._finals or self._stopped):
                self._ready.wait()
            batch, self._outputs = self._outputs, []
            if not batch and not self._finals and self._stopped:
                return None
        if len(batch) > 1:
            ranks: dict[str, int] = {}
            for key, output, end in batch:
                rank = self._rank(key, output, end)
                if rank < ranks.get(key, FOLLOWING + 1):
                    ranks[key] = rank
            batch.sort(key=lambda item: ranks[item[0]])
        return batch
