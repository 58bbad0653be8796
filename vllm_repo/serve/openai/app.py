"""The OpenAI-compatible HTTP API in front of Triton: routes, authentication, and the stream copy.

A thin proxy on purpose. The bodies, statuses and streamed chunks are vLLM's own, made by its OpenAI serving layer
inside each model's backend; the gateway only finds the Triton model a request names, forwards the body, and writes
each response's bytes the moment it arrives. What it answers itself (health, the model list's assembly, an unknown
model when no backend is there to say so, authentication) follows ``vllm serve``'s shapes.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from http import HTTPStatus
from typing import Any

from aiohttp import web

from vllm_repo.serve.openai.catalog import ModelCatalog
from vllm_repo.serve.openai.triton import TritonOpenAIClient, TritonUnavailable

# The paths vllm serve's --api-key guards (its AuthenticationMiddleware): everything under /v1, never /health.
GUARDED_PREFIX = "/v1"
GENERATION_ENDPOINTS = ("/v1/chat/completions", "/v1/completions")
NO_MODEL_READY = "no model that speaks OpenAI is ready on Triton"


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
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if not self.allows(request):
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)


class OpenAIGateway:
    """The aiohttp application. ``triton`` is the server's gRPC side; ``api_keys`` empty means no authentication."""

    def __init__(self, triton: TritonOpenAIClient, api_keys: list[str] | None = None) -> None:
        self.triton = triton
        self.catalog = ModelCatalog(triton)
        self.api_keys = [k for k in api_keys or () if k]

    def application(self) -> web.Application:
        middlewares = [ApiKeyCheck(self.api_keys).middleware] if self.api_keys else []
        # Bodies up to what vLLM accepts from a long multimodal prompt; aiohttp's 1 MiB default is too small.
        app = web.Application(middlewares=middlewares, client_max_size=64 * 2**20)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.list_models)
        for endpoint in GENERATION_ENDPOINTS:
            app.router.add_post(endpoint, self.generate)
        app.on_cleanup.append(self._close)
        return app

    async def _close(self, app: web.Application) -> None:
        await self.triton.close()

    async def health(self, request: web.Request) -> web.Response:
        """200 while Triton is ready (every model it loaded is ready) and serves a model that speaks OpenAI."""
        try:
            ready = await self.triton.server_ready() and bool(await self.triton.openai_models())
        except TritonUnavailable:
            ready = False
        return web.Response(status=200 if ready else 503)

    async def list_models(self, request: web.Request) -> web.Response:
        try:
            await self.catalog.refresh()
        except TritonUnavailable as exc:
            return error_response(str(exc), HTTPStatus.SERVICE_UNAVAILABLE)
        return web.json_response({"object": "list", "data": self.catalog.cards})

    async def generate(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            # vLLM's own answer to a body that is not a JSON object: the backend takes it as the raw text.
            try:
                await self.catalog.owner_of(None)
            except TritonUnavailable as exc:
                return error_response(str(exc), HTTPStatus.SERVICE_UNAVAILABLE)
            if not self.catalog.models:
                return error_response(NO_MODEL_READY, HTTPStatus.SERVICE_UNAVAILABLE)
            return await self._forward(request, self.catalog.models[0], raw.decode("utf-8", "replace"))
        name = body.get("model")
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
            # Any backend's vLLM answers an unknown name exactly as vllm serve does (after validating the body).
            model = self.catalog.models[0]
        return await self._forward(request, model, body)

    async def _forward(self, request: web.Request, model: str, body: dict[str, Any] | str) -> web.StreamResponse:
        streamed = isinstance(body, dict) and body.get("stream") is True
        response: web.StreamResponse | None = None
        collected: list[bytes] = []
        status = 200
        try:
            async for chunk in self.triton.call(model, request.path, body):
                if chunk.status is not None:
                    status = chunk.status
                if not (streamed and status == 200):
                    collected.append(chunk.body)
                    continue
                if response is None:
                    response = web.StreamResponse(status=200)
                    response.content_type = "text/event-stream"
                    response.charset = "utf-8"
                    await response.prepare(request)
                if chunk.body:
                    await response.write(chunk.body)
        except TritonUnavailable as exc:
            if response is None:
                return await self._refused(model, exc)
            # Mid-stream, as vLLM itself reports an error once the stream has begun: an error event, then [DONE].
            event = error_body(str(exc), HTTPStatus.INTERNAL_SERVER_ERROR).decode()
            await response.write(f"data: {event}\n\ndata: [DONE]\n\n".encode())
        if response is None:
            return web.Response(body=b"".join(collected), status=status, content_type="application/json")
        await response.write_eof()
        return response

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
