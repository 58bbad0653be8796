"""Timestamps of named hops along a request's way, for the hop benchmarks (bench/native_hops.py, bench/openai_hops.py).

Off unless VLLM_REPO_TRACE_HOPS names a directory when this module is first imported. Then each process appends one
line per hop, `TAG KEY NANOSECONDS` (time.monotonic_ns(), one clock for every process of the host and the one Triton's
trace uses), to DIR/hops.<pid>. Off, ``hop`` is ``off``, a module-level function that does nothing, and the hot paths
check ``hop is not off`` before they make a hop's key: a reference compared, nothing called, no environment read.
Standard library only: the gateway records its hops through it too.
"""

from __future__ import annotations

import atexit
import os
import time
from collections.abc import Callable, Iterable
from typing import IO, Any

TRACE_HOPS = "VLLM_REPO_TRACE_HOPS"


def off(tag: str, key: object, ns: int | None = None) -> None:
    """No hop recorded: VLLM_REPO_TRACE_HOPS is not set."""


class HopLog:
    """DIR/hops.<pid>, written through a large buffer (a write per hop would slow what it times), flushed by
    ``flush()``, before a fork and at exit; a forked child opens a file of its own."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._file: IO[str] | None = None
        self._open()
        atexit.register(self.flush)
        # Written out before a fork, so the child's copy of the buffer is empty: no line is written twice.
        os.register_at_fork(before=self.flush, after_in_child=self._open)

    def _open(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        self._file = open(os.path.join(self.directory, f"hops.{os.getpid()}"), "a", buffering=1 << 20)  # noqa: SIM115

    def __call__(self, tag: str, key: object, ns: int | None = None) -> None:
        assert self._file is not None
        self._file.write(f"{tag} {key} {time.monotonic_ns() if ns is None else ns}\n")

    def flush(self) -> None:
        if self._file is not None and not self._file.closed:
            self._file.flush()


def hop_recorder(directory: str | None) -> Callable[..., None]:
    """The hook: ``off`` without a directory, else a log of the hops into it."""
    return HopLog(directory) if directory else off


hop: Callable[..., None] = hop_recorder(os.environ.get(TRACE_HOPS))

# When Triton called execute() for each request (by its object's id) and for the last call: a request's hops start
# there, before its id is read.
_executed: dict[int, int] = {}
_last_execute = [0]


def flush() -> None:
    """What was recorded, written out (at the end of a measurement, at unload)."""
    if isinstance(hop, HopLog):
        hop.flush()


def executed(requests: Iterable[Any]) -> None:
    """execute() was called with ``requests`` now."""
    now = time.monotonic_ns()
    _last_execute[0] = now
    for request in requests:
        _executed[id(request)] = now


def admitted(request_id: str, request: Any) -> None:
    """A native request is on the engine loop: X when execute() took it, A now."""
    hop("X", request_id, _executed.pop(id(request), 0))
    hop("A", request_id)


def first_outputs_read(outputs: Iterable[tuple[str, Any, Any]], live: dict[str, Any]) -> None:
    """ENGINE_PROCESS: the stub has read a message of outputs from the engine's process; V for each request whose
    first response is still to go (only those: a line per output would double what a run writes)."""
    for key, _, _ in outputs:
        job = live.get(key)
        if job is not None and getattr(job, "first", False):
            hop("V", key)


def openai_admitted(stream_id: object) -> None:
    """An OpenAI request read from its envelope: B0 when execute() took it, B1 now."""
    hop("B0", stream_id, _last_execute[0])
    hop("B1", stream_id)
