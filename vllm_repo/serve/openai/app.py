"""The OpenAI-compatible HTTP API in front of Triton: routes, authentication, and the stream copy.

A thin proxy on purpose. The bodies, statuses and streamed chunks are vLLM's own, made by its OpenAI serving layer
inside each model's backend; the gateway only finds the Triton model a request names, forwards the body, and writes
each response's bytes the moment it arrives. What it answers itself (health, the model list's assembly, an unknown
model, authentication) follows ``vllm serve``'s shapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import secrets
import time
from http import HTTPStatus
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from vllm_repo.backend.vllm_repo_backend import hops
from vllm_repo.backend.vllm_repo_backend.contract import (
    OPENAI_MODEL_ENDPOINTS,
    STREAM_FRAME_DATA,
    STREAM_FRAME_END,
    STREAM_FRAME_START,
)
from vllm_repo.serve.openai.catalog import ModelCatalog
from vllm_repo.serve.openai.cors import NO_CORS, CorsPolicy
from vllm_repo.serve.openai.stream_socket import StreamInbox, StreamSocket
from vllm_repo.serve.openai.triton import Chunk, TritonOpenAIClient, TritonUnavailable

# The hop benchmarks' timestamps (hops.py): with VLLM_REPO_TRACE_HOPS unset, one reference compared per site.
_hop, _no_hop = hops.hop, hops.off

# The paths vllm serve's --api-key guards (its AuthenticationMiddleware): everything under /v1, never /health.
GUARDED_PREFIX = "/v1"
NO_MODEL_READY = "no model that speaks OpenAI is ready on Triton"
# How long a stream whose Triton side has ended may wait for the rest of its bytes on the stream socket: the backend
# writes them before its final response, so they are at most a moment behind.
STREAM_SOCKET_GRACE_S = 10.0
# How long a request's Triton call may take to end after its client has the answer or went away, before it is
# cancelled: its backend was told (the final response is out, or CANCEL reached it) and ends it within a second.
CALL_END_LIMIT_S = 60.0
# How long /metrics waits for Triton's metrics endpoint: a Prometheus scrape's own timeout is 10 s by default.
METRICS_TIMEOUT_S = 8.0
# Inbox entries beside the socket's frames: a response from Triton, or Triton's failure.
_FROM_TRITON, _TRITON_FAILED = "triton", "failed"
# Client headers that stay at the gateway: those of the connection between client and gateway (RFC 9110's hop-by-hop
# fields, and any the Connection header names), the length, which the backend sets for the body it passes on, and the
# credentials, kept out of Triton's request traces: those the gateway checks itself, and X-Api-Key, where the anthropic
# SDK sends its key (vLLM reads it nowhere; vllm serve's --api-key takes a Bearer token). vLLM's app gets the rest, as
# vllm serve's does: it reads Content-Type (it refuses all but JSON), X-Request-Id (the answer's id), X-Vllm-Priority,
# X-Session-ID, X-data-parallel-rank and the trace context.
HEADERS_KEPT_AT_GATEWAY = frozenset(
    {
        "authorization",
        "connection",
        "content-length",
        "cookie",
        "expect",
        "host",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "x-api-key",
    }
)


def forwarded_headers(request: web.Request) -> list[list[str]]:
    """The client's headers for the backend's vLLM app, in order, names lower-cased (as ASGI servers give them)."""
    named_by_connection = {
        token.strip().lower() for value in request.headers.getall("Connection", ()) for token in value.split(",")
    }
    return [
        [name.lower(), value]
        for name, value in request.headers.items()
        if name.lower() not in HEADERS_KEPT_AT_GATEWAY and name.lower() not in named_by_connection
    ]


def error_body(message: str, status: HTTPStatus, param: str | None = None) -> bytes:
    """vLLM's ErrorResponse: {"error": {"message", "type", "param", "code"}}, type named after the status."""
    kind = {
        HTTPStatus.BAD_REQUEST: "BadRequestError",
        HTTPStatus.NOT_FOUND: "NotFoundError",
        HTTPStatus.SERVICE_UNAVAILABLE: "ServiceUnavailableError",
    }.get(status, "InternalServerError")
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": int(status)}}).encode()


def error_response(message: str, status: HTTPStatus, param: str | None = None) -> web.Response:
    return web.Response(body=error_body(message, status, param), status=int(status), content_type="application/json")


# vLLM takes names it does not serve with these set (any name at all; a LoRA adapter loaded on demand): the backend
# decides, not the gateway.
VLLM_ANY_NAME_VARIABLES = ("VLLM_SKIP_MODEL_NAME_VALIDATION", "VLLM_ALLOW_RUNTIME_LORA_UPDATING")
ANTHROPIC_ROUTES = ("/v1/messages", "/v1/messages/count_tokens")


def vllm_answers_unknown_names(request: web.Request) -> bool:
    """Whether a request naming no served model goes to a backend anyway: vLLM refuses a body sent as anything but
    JSON with its 400 before it looks at the model, and with VLLM_ANY_NAME_VARIABLES set it may serve the name."""
    if request.content_type != "application/json":
        return True
    return any(os.environ.get(v, "0").strip().lower() in ("1", "true") for v in VLLM_ANY_NAME_VARIABLES)


def unknown_model_response(path: str, name: str, served: list[str]) -> web.Response:
    """vllm serve's 404 for a model it does not serve, naming every served model (its "Valid aliases"), in the shape
    of the route asked: Anthropic's for the Messages API, vLLM's ErrorResponse for the rest. The gateway answers it
    itself: vLLM would log the client's mistake as an ERROR line in Triton's log."""
    message = f"The model `{name}` does not exist. Valid aliases: {', '.join(served)}."
    if path in ANTHROPIC_ROUTES:
        body = {"type": "error", "error": {"type": "NotFoundError", "message": message}}
        return web.Response(body=json.dumps(body).encode(), status=404, content_type="application/json")
    return error_response(message, HTTPStatus.NOT_FOUND, "model")


@web.middleware
async def fastapi_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A path the API does not have, or a method its path does not take, answered as vllm serve's FastAPI app answers
    them: a JSON ``detail`` (and the Allow header), not aiohttp's plain text."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as exc:
        allow = ", ".join(sorted(exc.allowed_methods))
        return web.json_response({"detail": "Method Not Allowed"}, status=405, headers={"Allow": allow})
    except web.HTTPNotFound:
        return web.json_response({"detail": "Not Found"}, status=404)


class ApiKeyCheck:
    """``Authorization: Bearer KEY`` on every /v1 path, as vllm serve --api-key checks it (constant-time compare of
    digests, any of several keys)."""

    def __init__(self, keys: list[str]) -> None:
        self._digests = [hashlib.sha256(k.encode()).digest() for k in keys]

    def allows(self, request: web.Request) -> bool:
        if request.method == "OPTIONS" or not request.path.startswith(GUARDED_PREFIX):
            return True
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(token.encode()).digest()
        matched = False
        for known in self._digests:
            matched |= secrets.compare_digest(digest, known)
        return matched

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.allows(request):
            refused = web.json_response({"error": "Unauthorized"}, status=401)
            refused[NO_CORS] = True  # vllm serve checks the key outside its CORS middleware
            return refused
        return await handler(request)


class Relay:
    """What one OpenAI request has written to its client so far, from Triton's responses and the stream socket."""

    def __init__(self, request: web.Request, streamed: bool) -> None:
        self.request = request
        self.streamed = streamed
        self.response: web.StreamResponse | None = None
        self.status = 200
        self.collected: list[bytes] = []
        self.bytes_from_triton = False

    async def _stream(self) -> web.StreamResponse:
        if self.response is None:
            self.response = web.StreamResponse(status=200)
            self.response.content_type = "text/event-stream"
            self.response.charset = "utf-8"
            await self.response.prepare(self.request)
        return self.response

    async def from_triton(self, chunk: Chunk) -> None:
        if chunk.status is not None:
            self.status = chunk.status
        self.bytes_from_triton |= bool(chunk.body)
        if not (self.streamed and self.status == 200):
            self.collected.append(chunk.body)
            return
        response = await self._stream()
        if chunk.body:
            await response.write(chunk.body)

    async def from_socket(self, data: bytes) -> None:
        if data:
            await (await self._stream()).write(data)

    async def begin(self) -> None:
        """The streamed answer has begun: its headers go now, and its first chunk needs only its own write."""
        await self._stream()

    async def failed(self, exc: TritonUnavailable) -> None:
        """Mid-stream, as vLLM itself reports an error once the stream has begun: an error object, then [DONE]; for
        the Anthropic Messages API an ``error`` event, the only kind its clients read."""
        # Only then: before the stream begins, a failure is answered with an error status instead (the callers check).
        assert self.response is not None
        if self.request.path.startswith("/v1/messages"):
            error = json.dumps({"type": "error", "error": {"type": "internal_error", "message": str(exc)}})
            await self.response.write(f"event: error\ndata: {error}\n\n".encode())
            return
        event = error_body(str(exc), HTTPStatus.INTERNAL_SERVER_ERROR).decode()
        await self.response.write(f"data: {event}\n\ndata: [DONE]\n\n".encode())

    async def finish(self) -> web.StreamResponse:
        if self.response is None:
            return web.Response(body=b"".join(self.collected), status=self.status, content_type="application/json")
        await self.response.write_eof()
        return self.response


class OpenAIGateway:
    """The aiohttp application. ``triton`` is the server's gRPC side; ``api_keys`` empty means no authentication;
    ``streams``, when Triton is on this host, is where its backends write streamed responses; ``cors``, which other
    origins' pages may call it (none by default, as vllm serve); ``metrics_url``, Triton's metrics endpoint, which
    /metrics serves as vllm serve serves its own (without it, /metrics is not a route)."""

    def __init__(
        self,
        triton: TritonOpenAIClient,
        api_keys: list[str] | None = None,
        streams: StreamSocket | None = None,
        cors: CorsPolicy | None = None,
        metrics_url: str | None = None,
    ) -> None:
        self.triton = triton
        self.metrics_url = metrics_url
        self._http: aiohttp.ClientSession | None = None
        self.cors = cors or CorsPolicy()
        self.catalog = ModelCatalog(triton)
        self.api_keys = [k for k in api_keys or () if k]
        self.streams = streams
        # Models whose backend has written to the stream socket, so reads the CANCEL frames there too: their requests
        # share one Triton stream, which cannot cancel them one by one.
        self._socket_readers: set[str] = set()
        # Requests whose client has its answer (or went away) while their Triton call has yet to end (_let_end).
        self._ending: set[asyncio.Task] = set()

    def application(self) -> web.Application:
        middlewares = [ApiKeyCheck(self.api_keys).middleware] if self.api_keys else []
        # Bodies up to what vLLM accepts from a long multimodal prompt; aiohttp's 1 MiB default is too small.
        app = web.Application(middlewares=[*middlewares, fastapi_errors], client_max_size=64 * 2**20)
        self.cors.install(app)
        # No HEAD beside GET: vllm serve's routes take only the methods they name (a 405 says so in its Allow).
        app.router.add_get("/health", self.health, allow_head=False)
        # vllm serve's /ping is its /health (SageMaker's name for it), for GET and POST.
        app.router.add_get("/ping", self.health, allow_head=False)
        app.router.add_post("/ping", self.health)
        app.router.add_get("/v1/models", self.list_models, allow_head=False)
        app.router.add_get("/version", self.version, allow_head=False)
        if self.metrics_url is not None:
            app.router.add_get("/metrics", self.metrics, allow_head=False)
        for endpoint in OPENAI_MODEL_ENDPOINTS:
            app.router.add_post(endpoint, self.generate)
        app.router.add_get("/v1/responses/{response_id}", self.stored_response, allow_head=False)
        app.router.add_post("/v1/responses/{response_id}/cancel", self.stored_response)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, app: web.Application) -> None:
        for task in list(self._ending):
            task.cancel()
        await asyncio.gather(*self._ending, return_exceptions=True)
        await self.triton.close()
        if self._http is not None:
            await self._http.close()

    async def health(self, request: web.Request) -> web.Response:
        """200 while Triton is ready (every model it loaded is ready) and serves a model that speaks OpenAI, and every
        such model's engine lives. A model stays loaded in Triton when its engine dies unless its backend can unload
        it (explicit model control): each backend is asked, as vllm serve's /health asks its engine."""
        try:
            models = await self.triton.openai_models() if await self.triton.server_ready() else []
            ready = bool(models) and all(await asyncio.gather(*(self._engine_lives(m) for m in models)))
        except TritonUnavailable:
            ready = False
        return web.Response(status=200 if ready else 503)

    async def _engine_lives(self, model: str) -> bool:
        try:
            statuses = [chunk.status async for chunk in self.triton.call(model, "/health")]
        except TritonUnavailable:
            return False
        # 503: its engine is dead; a 500 to every request is how a backend without /health says so (its 404 is not).
        return not set(statuses) & {500, 503}

    async def metrics(self, request: web.Request) -> web.Response:
        """vllm serve's /metrics, where a scrape configured for vllm serve looks: Triton's metrics, which carry each
        model's vLLM families (``vllm:*``, labelled with the model) when its backend reports them, beside Triton's
        own. Open without the API key, as vllm serve's is."""
        assert self.metrics_url is not None  # app() adds this route only when there is one
        if self._http is None:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=METRICS_TIMEOUT_S))
        try:
            async with self._http.get(self.metrics_url) as answer:
                body = await answer.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            reason = str(exc) or f"no answer within {METRICS_TIMEOUT_S:.0f} s"
        else:
            if answer.status == 200:
                kind = answer.headers.get("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                return web.Response(body=body, headers={"Content-Type": kind})
            reason = f"it answered {answer.status}"
        message = f"Triton's metrics endpoint {self.metrics_url} cannot be read: {reason}"
        return error_response(message, HTTPStatus.SERVICE_UNAVAILABLE)

    async def version(self, request: web.Request) -> web.StreamResponse:
        """The vLLM release of the first ready model's backend, as vllm serve reports its own."""
        return await self._forward_to_first_model(request, None)

    async def _ready_models(self) -> list[str] | web.Response:
        """The models that speak OpenAI, as the catalog last saw them (asked again at most once a second), or the
        503 that says why there are none."""
        try:
            await self.catalog.owner_of(None)
        except TritonUnavailable as exc:
            return error_response(str(exc), HTTPStatus.SERVICE_UNAVAILABLE)
        return self.catalog.models or error_response(NO_MODEL_READY, HTTPStatus.SERVICE_UNAVAILABLE)

    async def _forward_to_first_model(self, request: web.Request, body: str | None) -> web.StreamResponse:
        """A request that names no model goes to the first ready model's backend."""
        models = await self._ready_models()
        if isinstance(models, web.Response):
            return models
        return await self._forward(request, models[0], body, False)

    async def stored_response(self, request: web.Request) -> web.StreamResponse:
        """A stored response, retrieved or cancelled (vllm serve keeps them with VLLM_ENABLE_RESPONSES_API_STORE=1).
        Its id names no model, so each ready model's backend is asked in turn: the first that knows the id answers,
        and when none does, the last one's 404 is the answer, as vllm serve's."""
        models = await self._ready_models()
        if isinstance(models, web.Response):
            return models
        # ?stream=true replays a background response's events.
        relay = Relay(request, streamed=request.query.get("stream", "").lower() == "true")
        headers = forwarded_headers(request)
        for model in models:
            answered = model == models[-1]
            chunks = self.triton.call(model, request.path_qs, None, headers=headers)
            try:
                async with contextlib.aclosing(chunks):
                    async for chunk in chunks:
                        if not answered and chunk.status == HTTPStatus.NOT_FOUND:
                            break  # not this backend's: ask the next
                        answered = True
                        await relay.from_triton(chunk)
            except TritonUnavailable as exc:  # a model unloaded since the catalog's look is skipped, unless last
                if relay.response is not None:
                    await relay.failed(exc)
                elif answered:
                    return await self._refused(model, exc)
            if answered:
                break
        return await relay.finish()

    async def list_models(self, request: web.Request) -> web.Response:
        try:
            await self.catalog.refresh()
        except TritonUnavailable as exc:
            return error_response(str(exc), HTTPStatus.SERVICE_UNAVAILABLE)
        return web.json_response({"object": "list", "data": self.catalog.cards})

    async def generate(self, request: web.Request) -> web.StreamResponse:
        if _hop is not _no_hop:
            request["hops_handler_ns"] = time.monotonic_ns()
        raw = await request.read()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            # vLLM's own answer to a body that is not a JSON object: the backend takes it as the raw text.
            return await self._forward_to_first_model(request, raw.decode("utf-8", "replace"))
        name = body.get("model") or None  # vllm serve takes "" as no name: its default model
        try:
            model = await self.catalog.owner_of(name if isinstance(name, str) else None)
        except TritonUnavailable as exc:
            return error_response(str(exc), HTTPStatus.SERVICE_UNAVAILABLE)
        if model is None:
            if not self.catalog.models:
                return error_response(NO_MODEL_READY, HTTPStatus.SERVICE_UNAVAILABLE)
            if name is None:
                return error_response(
                    f"`model` is required: this server serves {', '.join(self.catalog.models)}",
                    HTTPStatus.BAD_REQUEST,
                    "model",
                )
            if isinstance(name, str) and not vllm_answers_unknown_names(request):
                return unknown_model_response(request.path, name, self.catalog.served_names)
            # A backend's vLLM answers: a `model` that is no string, a body it refuses before it looks at the name,
            # or a name it may take after all.
            model = self.catalog.models[0]
        streamed = body.get("stream") is True
        try:
            # The client's own bytes, as a string in the envelope: vLLM parses them as vllm serve would, and the
            # backend, whose execute() admits requests one at a time, need not parse and re-encode the body first.
            forwarded: dict[str, Any] | str = raw.decode("utf-8")
        except UnicodeDecodeError:  # a UTF-16 or UTF-32 body, which JSON allows: vLLM gets it re-encoded
            forwarded = body
        return await self._forward(request, model, forwarded, streamed)

    async def _forward(
        self, request: web.Request, model: str, body: dict[str, Any] | str | None, streamed: bool
    ) -> web.StreamResponse:
        relay = Relay(request, streamed)
        # A streamed answer is offered the socket. Any other request to a backend known to read the socket names it
        # too, for the CANCEL frame alone (its answer comes through Triton): it then goes on the shared stream, and
        # no gRPC call is cancelled when its client goes away.
        offered = streamed or model in self._socket_readers
        inbox = self.streams.open() if offered and self.streams is not None else None
        headers = forwarded_headers(request)
        try:
            try:
                if inbox is None:
                    async with contextlib.aclosing(self.triton.call(model, request.path, body, headers=headers)) as it:
                        async for chunk in it:
                            await relay.from_triton(chunk)
                else:
                    await self._relay_with_socket(model, request.path, body, headers, inbox, relay)
            except TritonUnavailable as exc:
                if relay.response is None:
                    return await self._refused(model, exc)
                await relay.failed(exc)
            finally:
                if inbox is not None:
                    inbox.close()
            return await relay.finish()
        except ConnectionResetError:
            # The client went away mid-stream: aiohttp says so on a write, before it cancels the handler, and the
            # request was cancelled on the way out. Not an error to log (vllm serve logs none): the stream that was
            # begun is all aiohttp needs, and it knows the client is gone.
            assert relay.response is not None  # only a begun stream writes
            return relay.response

    async def _relay_with_socket(
        self,
        model: str,
        path: str,
        body: dict[str, Any] | str | None,
        headers: list[list[str]],
        inbox: StreamInbox,
        relay: Relay,
    ) -> None:
        """Triton's responses and the socket's frames in one inbox, written in the order they come. The answer is
        complete once Triton's final response is in and, if the bytes took the socket, its END frame too."""

        shared = model in self._socket_readers
        if _hop is not _no_hop:
            _hop("G0", inbox.id, relay.request.get("hops_handler_ns", 0))
            _hop("G1", inbox.id)

        async def from_triton() -> None:
            try:
                chunks = self.triton.call(model, path, body, headers=headers, stream_to=inbox.address, shared=shared)
                async for chunk in chunks:
                    inbox.queue.put_nowait((_FROM_TRITON, chunk))
            except Exception as exc:  # TritonUnavailable; anything else is a bug, raised here rather than hung on
                inbox.queue.put_nowait((_TRITON_FAILED, exc))

        triton_side = asyncio.create_task(from_triton())
        triton_done = socket_used = socket_done = False
        try:
            while not triton_done or (socket_used and not socket_done) or self._bytes_may_follow(relay, socket_used):
                try:
                    kind, item = await asyncio.wait_for(
                        inbox.queue.get(), STREAM_SOCKET_GRACE_S if triton_done else None
                    )
                except asyncio.TimeoutError:
                    raise TritonUnavailable(
                        f"the backend ended the request but its streamed bytes did not reach the gateway's socket "
                        f"within {STREAM_SOCKET_GRACE_S:.0f} s"
                    ) from None
                if kind == _TRITON_FAILED:
                    raise item
                if kind == _FROM_TRITON:
                    await relay.from_triton(item)
                    triton_done = item.final
                elif kind == STREAM_FRAME_START:
                    socket_used = True
                    await relay.begin()
                elif kind == STREAM_FRAME_DATA:
                    socket_used = True
                    if _hop is not _no_hop:
                        _hop("G3", inbox.id)
                    await relay.from_socket(item)
                    if _hop is not _no_hop:
                        _hop("G4", inbox.id)
                elif kind == STREAM_FRAME_END:
                    socket_used = socket_done = True
        finally:
            if socket_used:
                self._socket_readers.add(model)
            elif relay.streamed and relay.status == 200 and relay.bytes_from_triton:
                self._socket_readers.discard(model)  # it streamed through Triton: this backend cannot reach the socket
            # Before Triton's final response (the client went away), the socket's CANCEL frame tells the backend at
            # once; a backend that reads the socket then ends the request itself, and its call ends as calls do.
            # Cancelling a call while Triton completes it crashes Triton 2.51's gRPC frontend (SIGSEGV in
            # ModelStreamInferHandler::Process, triton-inference-server/server#7840 and #8078), so only a request
            # whose backend has not shown that it reads the socket is cancelled through its call (on the shared
            # stream, that only stops listening). A call that has had its final response ends right after it.
            if not triton_done:
                inbox.cancel()
            if triton_done or socket_used:
                self._let_end(triton_side)
            else:
                triton_side.cancel()
                await asyncio.gather(triton_side, return_exceptions=True)

    def _let_end(self, task: asyncio.Task) -> None:
        """Let ``task`` (a request's Triton side) run to its call's end without anyone waiting for it; it is
        cancelled after CALL_END_LIMIT_S, or when the gateway stops."""
        self._ending.add(task)
        limit = asyncio.get_running_loop().call_later(CALL_END_LIMIT_S, task.cancel)

        def ended(done: asyncio.Task) -> None:
            limit.cancel()
            self._ending.discard(done)

        task.add_done_callback(ended)

    @staticmethod
    def _bytes_may_follow(relay: Relay, socket_used: bool) -> bool:
        """Triton's side has ended without bytes for a streamed 200 answer: they took the socket, not yet read."""
        return relay.streamed and not socket_used and relay.status == 200 and not relay.bytes_from_triton

    async def _refused(self, model: str, exc: TritonUnavailable) -> web.Response:
        """Triton refused the request itself: most often the model was unloaded since the last look (its engine died
        and the health check unloaded it), which is a 503 until it is back; the model list is refreshed for that."""
        try:
            await self.catalog.refresh()
        except TritonUnavailable as down:
            return error_response(str(down), HTTPStatus.SERVICE_UNAVAILABLE)
        if model not in self.catalog.models:
            return error_response(f"model `{model}` is not ready on Triton: {exc}", HTTPStatus.SERVICE_UNAVAILABLE)
        return error_response(str(exc), HTTPStatus.INTERNAL_SERVER_ERROR)
