"""vLLM's own OpenAI app (the one `vllm serve` runs, built as it builds it) answering a model's OpenAI requests on the
model's engine: in the stub's process (model.py) or, with ENGINE_PROCESS, in the engine's (engine_process.py).

Where an answer's bytes go is the caller's: they collect in the request's joiner (openai_wire.SseJoiner) and
``pump(job)`` sends what is pending, one Triton response in flight at a time. A streamed 200 answer whose gateway
named its stream socket goes there instead, in frames, and only its status goes through Triton at the end.

OpenAI requests (what an OpenAI gateway forwards, one Triton request per HTTP request):
  input   openai_request (STRING [1]): UTF-8 JSON {"endpoint": one of OPENAI_ENDPOINTS ("/v1/chat/completions",
          "/v1/completions", "/v1/responses", "/v1/messages", "/tokenize", ..., or OPENAI_ID_ENDPOINTS'
          "/v1/responses/ID"; a query string may follow "?"), "body": {...}, "headers": [[NAME, VALUE], ...]} (body:
          the client's JSON object, or a string of its raw body; none for a GET; headers: the client's). With it,
          every other input is ignored (text_input is still required: send "").
  outputs openai_status (INT32 [1], the HTTP status, on every response), openai_response (STRING [1], bytes to write
          to the HTTP body as they are)
  vLLM's own OpenAI app answers them, built as ``vllm serve`` builds it (its argument parser, build_app,
  init_app_state) on this model's engine at load (with openai.json, or VLLM_REPO_OPENAI_AT_LOAD=1 in the server's
  environment, which launch --openai-port sets), else when the first one arrives: the served model is its name,
  the LoRA adapters of multi_lora.json are its lora_modules, and ``<version>/openai.json`` ({vllm serve frontend
  option: value}, e.g. chat_template, relative to the version directory, tool_call_parser, response_role) is checked
  with vLLM's parser at load. A complete answer is one final response; a stream (``"stream": true``) sends the SSE
  bytes as vLLM yields them, joining chunks that wait while a response is in flight, the final flag on the last.
  With ``"stream_to": {"socket": PATH, "id": N}`` in the envelope (a gateway on this host), a streamed 200 answer's
  bytes go to that Unix socket as frames of stream N instead, and the final response carries the status alone;
  a socket that cannot be reached, or that does not say the gateway's hello first, is not written to.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from . import contract, environment, hops, jobs, log, openai_app, openai_wire

# The hop benchmarks' timestamps (hops.py): with VLLM_REPO_TRACE_HOPS unset, one reference compared per site.
_hop, _no_hop = hops.hop, hops.off

# How long vLLM's app has to end an OpenAI request after it was told the client went away, before its task is
# cancelled.
OPENAI_DISCONNECT_GRACE_S = 1.0


class OpenAIOutput(NamedTuple):
    """Bytes of an OpenAI answer for one Triton response, with its HTTP status (ENGINE_PROCESS's engine process sends
    these to the stub; a request answered at once gets one)."""

    status: int
    data: bytes
    final: bool


def admit(raw: Any, dead_reason: str | None, closing: bool, alive: bool) -> openai_wire.OpenAIEnvelope | OpenAIOutput:
    """The ``openai_request`` input, parsed for vLLM's app; or the answer it gets at once: a malformed envelope's
    error, /health's status (``alive``: 200, else 503), a dead engine's or an unloading model's error."""
    try:
        envelope = openai_wire.parse_openai_request(raw)
    except openai_wire.OpenAIError as exc:
        return OpenAIOutput(exc.status, exc.body(), True)
    if envelope.endpoint == "/health":
        return OpenAIOutput(200 if alive else 503, b"", True)
    error = None
    if dead_reason is not None:
        # What vllm serve answers once its engine is dead (EngineDeadError, a VLLMServerError), in our words.
        error = openai_wire.OpenAIError(500, dead_reason, "InternalServerError")
    elif closing:
        error = openai_wire.OpenAIError(503, "the model is being unloaded", "ServiceUnavailableError")
    return envelope if error is None else OpenAIOutput(error.status, error.body(), True)


def new_job(sender: Any, request_id: str, envelope: openai_wire.OpenAIEnvelope) -> jobs.OpenAIJob:
    return jobs.OpenAIJob(
        sender=sender,
        request_id=request_id,
        endpoint=envelope.endpoint,
        method=envelope.method,
        body=envelope.body,
        stream_to=envelope.stream_to,
        headers=envelope.headers,
        query=envelope.query,
    )


class OpenAIServing:
    """vLLM's app for one model instance and the OpenAI requests it answers. check_options() at load, before the
    engine starts; start() once it has; serve() for each request, on the engine's loop."""

    def __init__(
        self,
        model_name: str,
        version_dir: str,
        vllm: Any,
        engine_args: Any,
        lora_adapters: Mapping[str, str] | None,
        pump: Callable[[jobs.OpenAIJob], None],
    ) -> None:
        self.model_name, self.version_dir, self.vllm, self.engine_args = model_name, version_dir, vllm, engine_args
        self.lora_adapters, self.pump = lora_adapters, pump
        self.loop: asyncio.AbstractEventLoop | None = None
        self.engine: Any = None
        self.args: Any = None  # vllm serve's namespace of openai.json's frontend options
        self.unavailable: str | None = None  # why OpenAI requests are not served, once that is known
        self._build: asyncio.Future | None = None
        # Stream socket path -> the connection to that gateway (None: it could not be reached), made once, on the loop.
        self._links: dict[str, asyncio.Future] = {}

    def check_options(self) -> bool:
        """openai.json checked now, with vLLM's parser: a typo fails the load. Whether the app is to be built at load:
        with an openai.json, or with a gateway in front (OPENAI_AT_LOAD_ENV); else the first request builds it."""
        options = openai_app.load_openai_options(self.version_dir)
        if options is not None:
            started = time.monotonic()
            try:
                self.args = self._parse_args(options)
            except ImportError as exc:  # an old release: native requests still work
                self.unavailable = f"vLLM {self.vllm.version} has no OpenAI frontend parser this backend knows ({exc})"
                log.warn(f"[vllm] {os.path.join(self.version_dir, contract.OPENAI_FILE)} ignored: {self.unavailable}")
            else:
                log.info(f"[vllm] {contract.OPENAI_FILE} checked in {time.monotonic() - started:.2f} s")
        return options is not None or os.environ.get(contract.OPENAI_AT_LOAD_ENV, "") in contract.TRUE_STRINGS

    def start(self, loop: asyncio.AbstractEventLoop, engine: Any) -> None:
        self.loop, self.engine = loop, engine

    def cancel(self, job: jobs.OpenAIJob, reason: str) -> None:
        """End ``job`` because its client went away (or the model is unloading, ...): on the engine's loop."""
        if job.finished or job.task is None or job.task.done():
            return
        if job.cancel_reason is None and reason == "request was cancelled":
            log.info(f"[vllm] Cancelling the request {job.request_id}")
        job.cancel_reason = job.cancel_reason or reason
        if not job.disconnected.is_set():
            # vLLM's app is told as uvicorn tells vllm serve's: http.disconnect. Its routes run their work in a task
            # of their own (with_cancellation) that stops only then; cancelling the app's task instead left that task
            # generating a non-streamed answer to its end. A route that does not listen is cancelled after a grace.
            job.disconnected.set()
            assert self.loop is not None  # requests are served only once started
            self.loop.call_later(OPENAI_DISCONNECT_GRACE_S, self.cancel, job, reason)
            return
        job.task.cancel()

    async def close_links(self) -> None:
        """At unload: each gateway connection's reader ends, and the gateway sees EOF."""
        links = [f.result() for f in self._links.values() if f.done() and f.result()]
        for link in links:
            link.reading.cancel()
        await asyncio.gather(*(link.reading for link in links), return_exceptions=True)

    async def serve(self, job: jobs.OpenAIJob) -> None:
        """Answer ``job`` with vLLM's app; its bytes go out through ``pump(job)``, or to its gateway's stream socket."""
        sent_body = False
        if _hop is not _no_hop:
            _hop("B2", job.stream_to.id if job.stream_to is not None else -1)

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": job.body, "more_body": False}
            await job.disconnected.wait()  # vLLM's handlers listen for the client going away
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if job.cancel_reason is not None:
                return  # what the app answers once the client went away goes nowhere
            if message["type"] == "http.response.start":
                if _hop is not _no_hop:
                    _hop("B3", job.stream_to.id if job.stream_to is not None else -1)
                job.status = int(message["status"])
                headers = dict(message.get("headers") or ())
                job.streaming = headers.get(b"content-type", b"").startswith(b"text/event-stream")
                if job.streaming and job.status == 200 and link is not None and not link.closed:
                    job.stream_link = link
                    link.send(openai_wire.STREAM_FRAME.pack(stream_id, contract.STREAM_FRAME_START, 0))
            elif message["type"] == "http.response.body":
                job.body_complete = not message.get("more_body", False)
                if job.stream_link is not None:
                    await self._write_stream(
                        job, job.stream_link, stream_id, message.get("body", b""), job.body_complete
                    )
                    return
                job.joiner.push(message.get("body", b""))
                if job.body_complete:
                    job.joiner.finish()
                if job.streaming or job.joiner.done:
                    self.pump(job)

        link: openai_wire.StreamLink | None = None
        try:
            # Connected before the app runs (once per gateway): the first chunk does not wait for it.
            if job.stream_to is not None:
                link = await self._stream_link(job.stream_to.socket)
                if link is not None:
                    # Set wherever link is: the frames of this request's stream on that socket carry it.
                    stream_id = job.stream_to.id
                    # The gateway says over the link when the client goes away: the watcher need not ask Triton.
                    job.watched_by_link = True
                    link.attach(stream_id, job)
            try:
                app = await self.app()
            except openai_wire.OpenAIError as exc:
                job.status = exc.status
                job.joiner.push(exc.body())
            else:
                scope = openai_wire.asgi_scope(job.method, job.endpoint, job.query, job.headers, job.body)
                await app(scope, receive, send)
                if job.cancel_reason is not None:  # the app ended at the disconnect _cancel gave it
                    raise asyncio.CancelledError
        except asyncio.CancelledError:
            # The app ended at the disconnect, or its task was cancelled: vLLM's generator closed, aborting the request.
            self._ended_by_cancel(job)
        except Exception as exc:
            # vLLM's app answers its own errors; this is one it let through (e.g. a failing middleware).
            self._ended_by_error(job, exc)
        finally:
            self._close(job, link, stream_id if link is not None else None)

    @staticmethod
    def _ended_by_cancel(job: jobs.OpenAIJob) -> None:
        reason = job.cancel_reason or "request was cancelled"
        code = "CANCELLED" if reason == "request was cancelled" else "UNAVAILABLE"
        if code == "CANCELLED":
            log.info(f"[vllm] request {job.request_id} cancelled by the client: aborted in the engine")
            log.info(f"[vllm] Successfully cancelled the request {job.request_id}")
        job.error = (reason, code)
        job.joiner.pending.clear()

    def _ended_by_error(self, job: jobs.OpenAIJob, exc: Exception) -> None:
        log.error(f"[vllm] OpenAI request {job.endpoint} failed: {traceback.format_exc()}")
        message = f"{type(exc).__name__}: {exc}"
        if job.status is None:
            job.status = 500
            job.joiner.push(openai_wire.openai_error_body(message, 500, "InternalServerError"))
        elif job.streaming and not job.body_complete:
            self._end_failed_stream(job, message)

    def _close(self, job: jobs.OpenAIJob, link: openai_wire.StreamLink | None, stream_id: int | None) -> None:
        """The answer's end, whatever ended it: a status (500 where the app gave none), the stream's last frames, the
        final response."""
        job.disconnected.set()
        if job.status is None:
            job.status = 500
            job.joiner.push(
                openai_wire.openai_error_body("vLLM's OpenAI layer gave no response", 500, "InternalServerError")
            )
        job.joiner.finish()
        if job.stream_link is not None:
            job.stream_link.flush()  # the stream's last frames go before its final response
        if link is not None and stream_id is not None:
            link.detach(stream_id)
        self.pump(job)

    def _end_failed_stream(self, job: jobs.OpenAIJob, message: str) -> None:
        """A streamed answer whose app failed after it began ends as vLLM's own generators end a failing stream
        (failed_stream_tail). Its END frame goes too, or the gateway would wait for bytes that never come."""
        event = openai_wire.failed_stream_tail(job.endpoint, message)
        job.body_complete = True
        if job.stream_link is None:
            job.joiner.push(event)
        elif not job.stream_link.closed:
            assert job.stream_to is not None  # a stream link is made only for a request that names its socket
            job.stream_link.send(openai_wire.stream_frames(job.stream_to.id, event, last=True))

    async def _write_stream(
        self, job: jobs.OpenAIJob, link: openai_wire.StreamLink, stream_id: int, data: bytes, last: bool
    ) -> None:
        """A streamed response's bytes to the gateway's socket (``job.stream_link``, ``job.stream_to.id``): a frame,
        no round trip. The Triton final response (the status, no bytes) follows the END frame once the app returns."""
        if _hop is not _no_hop:
            _hop("B4", stream_id)
        if link.closed:  # the gateway went away: nobody reads this stream any more
            self.cancel(job, "the OpenAI gateway's stream socket closed")
            return
        link.send(openai_wire.stream_frames(stream_id, data, last))
        if link.buffered() > openai_wire.STREAM_SOCKET_HIGH_WATER:
            await link.drain()  # a gateway that reads slowly slows its streams, as a slow HTTP client would

    async def _stream_link(self, path: str) -> openai_wire.StreamLink | None:
        """The connection to the gateway whose stream socket is ``path``, made by the first request that names it;
        None when it cannot be reached (that gateway then gets its bytes through Triton, and one warning)."""
        link = self._links.get(path)
        if link is None or (link.done() and link.result() is not None and link.result().closed):
            link = self._links[path] = asyncio.ensure_future(openai_wire.connect_stream_link(path, self.cancel))
        return await asyncio.shield(link)

    async def app(self) -> Any:
        """vLLM's app, built on the first OpenAI request (shared by the requests that wait for it); OpenAIError when it
        cannot be built, for every request."""
        if self._build is None:
            self._build = asyncio.ensure_future(self._build_app())
        return await asyncio.shield(self._build)

    async def build_at_load(self) -> None:
        """At load: READY means the first OpenAI request is answered at once (a failed build fails those alone)."""
        with contextlib.suppress(openai_wire.OpenAIError):
            await self.app()

    def _not_served(self, status: int, kind: str) -> openai_wire.OpenAIError:
        return openai_wire.OpenAIError(
            status, f"OpenAI requests are not served by this model: {self.unavailable}", kind
        )

    async def _build_app(self) -> Any:
        if self.unavailable is not None:
            raise self._not_served(501, "NotImplementedError")
        started = time.monotonic()
        try:
            # Imports and the parser take a while: off the engine loop, which keeps serving native requests.
            builders, args = await asyncio.get_running_loop().run_in_executor(None, self._imports)
        except ImportError as exc:
            self.unavailable = f"vLLM {self.vllm.version} lacks an OpenAI serving API this backend uses ({exc})"
            log.error(f"[vllm] {self.unavailable}")
            raise self._not_served(501, "NotImplementedError") from None
        try:
            app = await openai_app.build_openai_app(
                builders, args, self.engine, self.engine_args, self.vllm.AsyncEngineArgs, self.model_name
            )
            frozen = environment.freeze_startup_heap()  # what the layer built is as static as the engine
        except Exception as exc:
            self.unavailable = f"vLLM's OpenAI layer could not be built: {type(exc).__name__}: {exc}"
            log.error(f"[vllm] {self.unavailable}\n{traceback.format_exc()}")
            raise self._not_served(500, "InternalServerError") from None
        log.info(f"[vllm] vLLM's OpenAI layer built in {time.monotonic() - started:.2f} s for model {self.model_name}")
        log.info(f"[vllm] {frozen} {environment.FROZEN_HEAP_LOG}")
        return app

    def _imports(self) -> tuple[tuple[Any, Any], Any]:
        args = self.args if self.args is not None else self._parse_args({})
        return openai_app.import_app_builders(), args

    def _parse_args(self, options: Mapping[str, Any]) -> Any:
        return openai_app.parse_frontend_options(
            options,
            os.path.join(self.version_dir, contract.OPENAI_FILE),
            [f.name for f in dataclasses.fields(self.vllm.AsyncEngineArgs)],
            self.lora_adapters,
        )
