"""Sending Triton responses off the engine loop: each send is a synchronous round trip to the server process, in
which the sending thread can do nothing else."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from . import log, native, stub

# Threads that send the responses between a native request's first and its final (SendThread), each request on one
# of them. The server answers sends from a pool of threads, but two or four of these gave no more than one: each is
# one more thread for the GIL (bench/results/backend.md, "The backend's settings, measured"). A request's first and
# final responses go out from threads of their own (EDGE_SEND_THREADS), never queued behind other streams' tokens: a
# client waits on each.
STREAM_SEND_THREADS = 1

# Threads that send requests' first and final responses, each request's on one of them. With one, a burst of requests
# queued their first responses behind each other, one round trip and one wait for the GIL apiece, and the last
# streams' first tokens waited for all of them (same section). Several overlap their round trips to the server, and
# one that gets the GIL back finds the others' sends ready to go.
EDGE_SEND_THREADS = 4

# Sends made before the send thread hands their completions to the engine loop at once (SendThread), unless its queue
# runs dry first.
SETTLE_BATCH = 16


class SendThread:
    """The thread that sends responses off the engine loop, each after every one submitted before it.

    A send is a synchronous round trip to the server in which the calling thread can do nothing else. Made on the
    engine loop, every send stalled every stream; worse, vLLM's output handler yields to the loop between chunks of
    VLLM_V1_OUTPUT_PROC_CHUNK_SIZE (128) outputs, so above 128 streams each stream woke for each token, and each token
    cost a send (the figures: bench/results/backend.md, "The backend's settings, measured"). Here the
    loop only queues. A native stream reads its next output from vLLM once its last response is sent (``done``), and
    vLLM's collector merges whatever the engine made meanwhile into that output, so responses per request fall as the
    load rises, whatever vLLM's chunk size. A request has one send in flight at a time, so its responses keep their
    order whichever thread sends them, and an error that ends it is queued behind the send in flight (the final
    response last: Triton frees a request with it).
    """

    def __init__(self, name: str = "vllm-sends") -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.sends = 0  # how many, and the seconds spent in them, for the finalize log line
        self.send_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, send: Callable[[], None], done: asyncio.Future | None = None) -> None:
        """``send()`` on the thread, after every send submitted before it; then ``done`` resolves on its loop, to None
        or to the exception the send raised (without ``done``, a failing send is logged)."""
        self._queue.put((send, done))

    def _run(self) -> None:
        log.name_os_thread(self._thread.name)
        get, get_nowait, clock = self._queue.get, self._queue.get_nowait, time.perf_counter
        # Futures are settled in batches, when the queue runs dry or SETTLE_BATCH sends have gone out: each hand-off
        # wakes the loop's thread, which then contends for the GIL with this one.
        settled: list[tuple[asyncio.Future, BaseException | None]] = []
        while True:
            try:
                item = get_nowait()
            except queue.Empty:
                self._settle(settled)
                item = get()
            if item is None:
                break
            send, done = item
            error = None
            started = clock()
            try:
                send()
            except Exception as exc:  # the client may be gone already
                error = exc
                if done is None:
                    log.warn(f"[vllm] could not send a response: {exc}")
            self.send_seconds += clock() - started
            self.sends += 1
            if done is not None:
                settled.append((done, error))
                if len(settled) >= SETTLE_BATCH:
                    self._settle(settled)
        self._settle(settled)

    @staticmethod
    def _settle(settled: list[tuple[asyncio.Future, BaseException | None]]) -> None:
        if not settled:
            return
        batch = settled[:]
        settled.clear()
        try:
            batch[0][0].get_loop().call_soon_threadsafe(_settle_all, batch)
        except RuntimeError:  # the loop has closed: nobody waits any more
            pass

    def stop(self) -> None:
        """Sends what was submitted, then ends the thread."""
        self._queue.put(None)
        self._thread.join(timeout=10)


def _settle_all(settled: list[tuple[asyncio.Future, BaseException | None]]) -> None:
    for done, error in settled:
        if done.done():  # its request was cancelled while the send was in flight
            continue
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)


def native_response(options: native.OutputOptions, output: Any, first: bool) -> Any:
    """The Triton response for one of a native request's outputs (vLLM's RequestOutput)."""
    tensors = native.assemble_outputs(output, options, first)
    return stub.pb_utils.InferenceResponse(
        output_tensors=[stub.pb_utils.Tensor(name, value) for name, value in tensors]
    )


def openai_response(status: int, data: bytes) -> Any:
    """The Triton response for bytes of an OpenAI answer: its HTTP status, and the bytes to write."""
    return stub.pb_utils.InferenceResponse(
        output_tensors=[
            stub.pb_utils.Tensor("openai_status", np.array([status], dtype=np.int32)),
            stub.pb_utils.Tensor("openai_response", np.array([data], dtype=np.object_)),
        ]
    )


def send_openai_final(sender: Any, status: int, data: bytes) -> None:
    """An OpenAI request's one and final response, answered at once."""
    try:
        sender.send(openai_response(status, data), flags=stub.pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    except Exception as exc:  # the client may be gone already
        log.warn(f"[vllm] could not send an OpenAI response ({status}): {exc}")


def send_error(sender: Any, message: str, code: str = "INTERNAL") -> None:
    """A request's final response: a Triton error with ``code`` (a TritonError code's name)."""
    error_cls = stub.pb_utils.TritonError
    try:
        error = error_cls(message, getattr(error_cls, code, error_cls.INTERNAL))
    except TypeError:  # older stubs take the message only
        error = error_cls(message)
    try:
        sender.send(
            stub.pb_utils.InferenceResponse(output_tensors=[], error=error),
            flags=stub.pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
        )
    except Exception as exc:  # the client may be gone already
        log.warn(f"[vllm] could not send an error response ({message}): {exc}")
