"""A request in flight: a native Triton request (``Job``) or an OpenAI one (``OpenAIJob``), with what its sends,
its cancellation and its end need; and the ids vLLM knows requests by."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import threading
import traceback
from typing import Any

from . import errors, log, native, openai_wire, sends, stub

# Seeded once from os.urandom. Triton's execute() runs on the stub's main thread, which must win the GIL back from
# the busy engine loop after every call that lets go of it: uuid4()'s os.urandom did, once per request admitted,
# and Triton hands the model its requests one execute() at a time.
_REQUEST_IDS = random.Random()


def new_request_id() -> str:
    """A random 128-bit request id, in hex as uuid4().hex gives it, made without a system call."""
    return f"{_REQUEST_IDS.getrandbits(128):032x}"


@dataclasses.dataclass
class Job:
    """One request in flight."""

    request: Any
    sender: Any
    request_id: str
    prompt: dict[str, Any]
    sampling_params: Any
    lora_request: Any
    options: native.OutputOptions
    task: asyncio.Task | None = None
    first: bool = True
    # Resolves once the last response queued for sending has been sent (sends.SendThread.submit).
    sent: asyncio.Future | None = None
    stream_sends: sends.SendThread | None = None  # the thread that sends its responses between the first and the final
    edge_sends: sends.SendThread | None = None  # the thread that sends its first and final responses
    last_sends: sends.SendThread | None = None  # the thread its last response was queued on
    finished: bool = False  # its final response is being or has been sent; set through _finish()
    # Held by the watcher thread around is_cancelled(), and by _finish(): Triton frees a request's response factory
    # with its final response, and asking a freed factory whether it was cancelled crashes the server.
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    cancel_reason: str | None = None
    # STREAM_ONE_RESPONSE_PER_TOKEN, on a stream: each completion's token ids so far (per_token.split), else None.
    token_history: dict[int, list[int]] | None = None


@dataclasses.dataclass
class OpenAIJob:
    """One OpenAI request in flight: vLLM's own app answers it; its bytes go out through ``joiner``."""

    sender: Any
    request_id: str
    endpoint: str
    method: str
    body: bytes
    joiner: openai_wire.SseJoiner = dataclasses.field(default_factory=openai_wire.SseJoiner)
    status: int | None = None  # the HTTP status vLLM's app started its response with
    streaming: bool = False
    body_complete: bool = False  # the app has sent the last of its body
    task: asyncio.Task | None = None
    finished: bool = False
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)  # as Job.lock
    cancel_reason: str | None = None
    error: tuple[str, str] | None = None  # (message, Triton error code) to end with instead of the bytes
    disconnected: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    stream_to: openai_wire.StreamTo | None = None
    headers: list[tuple[bytes, bytes]] | None = None  # the client's (OpenAIEnvelope.headers)
    query: bytes = b""  # the URL's query string (OpenAIEnvelope.query)
    # The gateway's stream socket, once a streamed 200 response is writing its bytes there.
    stream_link: openai_wire.StreamLink | None = None
    # Cancelled by the gateway's CANCEL frame (openai_wire.StreamLink) rather than found cancelled by the watcher.
    watched_by_link: bool = False


def input_array(request: Any, name: str) -> Any:
    """A Triton request's input ``name`` as an array, or None where the request has none."""
    tensor = stub.pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def read_native(
    reader: native.NativeRequestReader, request: Any, sender: Any, one_response_per_token: bool
) -> Job | None:
    """A native Triton request read into a Job (its inputs, sampling parameters, LoRA adapter and outputs); None
    where it cannot be read, its error answered (INVALID_ARG)."""
    try:
        read = reader.read(
            lambda name: input_array(request, name), request.parameters(), request.requested_output_names()
        )
    except errors.RequestError as exc:
        sends.send_error(sender, f"invalid request: {exc}", "INVALID_ARG")
        return None
    except Exception as exc:  # a bug here must not take down the stub
        log.error(f"[vllm] could not parse a request: {traceback.format_exc()}")
        sends.send_error(sender, f"invalid request: {exc}", "INVALID_ARG")
        return None
    return Job(
        request=request,
        sender=sender,
        request_id=new_request_id(),
        prompt=read.prompt,
        sampling_params=read.sampling_params,
        lora_request=read.lora_request,
        options=read.options,
        token_history={} if one_response_per_token and read.options.stream else None,
    )


def next_to_check(live: list[Any], budget: int, start: int) -> tuple[list[Any], int]:
    """The next ``budget`` of the requests in flight from ``start`` on, in turn, and where the next sweep starts: the
    cancellation checks a sweep may make are bounded (each is a round trip to the server)."""
    if len(live) <= budget:
        return live, start
    start %= len(live)
    return (live[start:] + live[:start])[:budget], start + budget


def client_cancelled(job: Job | OpenAIJob) -> bool:
    """Whether the client cancelled ``job``. Asked under its lock, and never once it is finished: Triton frees a
    request's response factory with its final response, and asking a freed factory crashes the server."""
    with job.lock:
        if job.finished or job.cancel_reason is not None:
            return False
        try:
            return bool(job.sender.is_cancelled())
        except Exception:
            return False


def send_failure_reason(job: Job | OpenAIJob) -> str:
    """Why a request whose response could not be sent is aborted: a client that cancelled is told so, as the watcher
    would have told it (the send can fail before the watcher asks)."""
    return "request was cancelled" if client_cancelled(job) else "the response could not be sent"
