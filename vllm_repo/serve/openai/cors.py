"""Cross-origin requests, answered as ``vllm serve --allowed-origins ... [--allow-credentials]`` answers them.

A chat UI served from another origin calls the API from the browser, which first asks with a preflight (OPTIONS with
Origin and Access-Control-Request-Method) and then reads the answer only if it names the UI's origin. vllm serve
answers both from its CORS middleware (Starlette's, with vLLM's options); the backend never sees the browser's
headers, so the gateway answers them itself, with the same options and the defaults of recent vLLM releases (0.32's):
no origin allowed unless ``--allowed-origins`` says so (0.26 still allowed every origin), every method and header.
"""

from __future__ import annotations

import dataclasses
import json

from aiohttp import web
from aiohttp.typedefs import Handler

from vllm_repo.errors import UsageError

# What vllm serve's '["*"]' stands for in a preflight's answer (Starlette's list, QUERY included).
EVERY_METHOD = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "QUERY")
# Headers a browser may always send: a preflight never needs them allowed.
SAFELISTED_HEADERS = ("Accept", "Accept-Language", "Content-Language", "Content-Type")
PREFLIGHT_MAX_AGE_S = 600
# A response the gateway wants left without CORS headers: vllm serve refuses a wrong API key outside its CORS
# middleware, so its 401 carries none.
NO_CORS = web.ResponseKey("vllm_repo_no_cors", bool) if hasattr(web, "ResponseKey") else "vllm_repo_no_cors"


@dataclasses.dataclass(frozen=True)
class CorsPolicy:
    allowed_origins: tuple[str, ...] = ()
    allow_credentials: bool = False
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)

    @classmethod
    def from_options(
        cls,
        allowed_origins: str | None = None,
        allow_credentials: bool = False,
        allowed_methods: str | None = None,
        allowed_headers: str | None = None,
    ) -> CorsPolicy:
        """From vllm serve's option values: each list a JSON array of strings (``'["https://ui.example"]'``)."""
        default = cls()
        return cls(
            allowed_origins=_json_list("--allowed-origins", allowed_origins, default.allowed_origins),
            allow_credentials=allow_credentials,
            allowed_methods=_json_list("--allowed-methods", allowed_methods, default.allowed_methods),
            allowed_headers=_json_list("--allowed-headers", allowed_headers, default.allowed_headers),
        )

    def argv(self) -> list[str]:
        """The same policy as `vllm-repo openai` options (launch passes them to its gateway)."""
        args = [
            "--allowed-origins",
            json.dumps(list(self.allowed_origins)),
            "--allowed-methods",
            json.dumps(list(self.allowed_methods)),
            "--allowed-headers",
            json.dumps(list(self.allowed_headers)),
        ]
        return args + (["--allow-credentials"] if self.allow_credentials else [])

    @property
    def any_origin(self) -> bool:
        return "*" in self.allowed_origins

    @property
    def methods(self) -> tuple[str, ...]:
        return EVERY_METHOD if "*" in self.allowed_methods else self.allowed_methods

    def allows_origin(self, origin: str) -> bool:
        return self.any_origin or origin in self.allowed_origins

    def preflight(self, request: web.Request) -> web.Response:
        """The answer to a preflight: 200 "OK", or 400 naming what is not allowed; the headers either way."""
        origin = request.headers["Origin"]
        headers = {
            "Vary": "Origin, Access-Control-Request-Method, Access-Control-Request-Headers, "
            "Access-Control-Request-Private-Network",
            "Access-Control-Allow-Methods": ", ".join(self.methods),
            "Access-Control-Max-Age": str(PREFLIGHT_MAX_AGE_S),
        }
        refused = []
        if not self.allows_origin(origin):
            refused.append("origin")
        elif self.any_origin and not self.allow_credentials:
            headers["Access-Control-Allow-Origin"] = "*"
        else:
            headers["Access-Control-Allow-Origin"] = origin
        if request.headers["Access-Control-Request-Method"] not in self.methods:
            refused.append("method")
        asked = request.headers.get("Access-Control-Request-Headers")
        if "*" in self.allowed_headers:
            if asked is not None:
                headers["Access-Control-Allow-Headers"] = asked  # every header: the ones asked for, named back
        else:
            allowed = sorted({*SAFELISTED_HEADERS, *self.allowed_headers})
            headers["Access-Control-Allow-Headers"] = ", ".join(allowed)
            lowered = {h.lower() for h in allowed}
            if asked is not None and any(h.strip().lower() not in lowered for h in asked.split(",")):
                refused.append("headers")
        if "Access-Control-Request-Private-Network" in request.headers:
            refused.append("private-network")  # vllm serve does not open a private network to public pages
        if self.allow_credentials:
            headers["Access-Control-Allow-Credentials"] = "true"
        if refused:
            return web.Response(status=400, text="Disallowed CORS " + ", ".join(refused), headers=headers)
        return web.Response(status=200, text="OK", headers=headers)

    def annotate(self, request: web.Request, response: web.StreamResponse) -> None:
        """The headers of an answer that is not a preflight. Every one varies by Origin, as vllm serve's do; one to a
        page at an allowed origin names it (or "*" where any origin is, without credentials)."""
        if response.get(NO_CORS):
            return
        origin = request.headers.get("Origin")
        if origin is not None:
            if self.allow_credentials:
                response.headers["Access-Control-Allow-Credentials"] = "true"
            if self.any_origin and not self.allow_credentials:
                response.headers["Access-Control-Allow-Origin"] = "*"
            elif self.allows_origin(origin):
                response.headers["Access-Control-Allow-Origin"] = origin
        response.headers.add("Vary", "Origin")

    def install(self, app: web.Application) -> None:
        """Preflights answered before routing and authentication; every other answer annotated as it is prepared
        (streamed answers included: their headers go out with the first chunk)."""

        @web.middleware
        async def preflights(request: web.Request, handler: Handler) -> web.StreamResponse:
            return self.preflight(request) if is_preflight(request) else await handler(request)

        async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
            if not is_preflight(request):
                self.annotate(request, response)

        app.middlewares.insert(0, preflights)
        app.on_response_prepare.append(on_prepare)


def is_preflight(request: web.Request) -> bool:
    headers = request.headers
    return request.method == "OPTIONS" and "Origin" in headers and "Access-Control-Request-Method" in headers


def _json_list(option: str, raw: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    if raw is None:
        return default
    hint = f"""give a JSON list of strings, e.g. {option} '["*"]'"""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{option} {raw!r} is not JSON: {exc.msg}", hint=hint) from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{option} {raw!r} is not a list of strings", hint=hint)
    return tuple(value)
