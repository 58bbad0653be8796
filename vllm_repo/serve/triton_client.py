"""The client of Triton Inference Server that vllm-repo's commands share, with the vLLM backend's inputs and outputs.

- ``TritonHttp``: the HTTP API (KServe v2 and Triton's extensions) on the standard library: health, a model's
  readiness, the repository index, model control (load, unload), generate and generate_stream's server-sent events;
- ``GenerateStreamConnection``: generate_stream on asyncio streams, one keep-alive connection, for a load generator
  whose own cost per response counts (it shares the machine's cores with the server);
- the gRPC side, ``TritonGrpc``, is serve/triton_grpc.py's.

Answers come back typed (``ModelEntry``, ``GenerateResponse``), failures as serve/errors.py's ``TritonUnreachable``
(nothing answers) or ``TritonAnswerError`` (the server's own words), naming the URL. Nothing here imports
tritonclient or numpy: validate goes without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http.client
import json
import time
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Sequence
from typing import Any

from vllm_repo.serve.errors import InferError, TritonAnswerError, TritonUnreachable
from vllm_repo.serve.ports import DEFAULT_URL

# Health and index requests answer at once from a live server; a slower answer counts as none.
DEFAULT_TIMEOUT_S = 5.0
# A completion may take long (a long output, a queue ahead of it); longer than this it has failed.
GENERATE_TIMEOUT_S = 600.0
# The vLLM backend's optional outputs, each sent only when the request sets ``return_<name>``.
RETURNED_OUTPUTS = ("finish_reason", "num_input_tokens", "num_output_tokens")
_INDEX_FIELDS = ("version", "state", "reason")
_NOT_TRITON = "is it a Triton server's HTTP port?"
_MODEL_CONTROL_HINT = "Triton loads and unloads models on request in --model-control-mode=explicit only"


# -- What goes in and what comes back ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelEntry:
    """One model of Triton's repository index. Triton names every model of the repository; the other fields are absent
    (None) for a model it never tried to load, ``reason`` is "" for a model that is fine."""

    name: str
    version: str | None = None
    state: str | None = None  # READY, LOADING, UNLOADING, UNAVAILABLE
    reason: str | None = None

    @classmethod
    def from_json(cls, entry: dict[str, Any]) -> ModelEntry:
        return cls(str(entry["name"]), *(None if entry.get(k) is None else str(entry[k]) for k in _INDEX_FIELDS))

    @property
    def ready(self) -> bool:
        return self.state == "READY"

    def as_json(self) -> dict[str, str]:
        """The entry as Triton wrote it: only the fields it sent."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclasses.dataclass(frozen=True)
class GenerateRequest:
    """One request to the vLLM backend: the prompt, vLLM's sampling parameters (sent as one JSON string, the way the
    backend takes them), and which outputs to return. ``exclude_input_in_output`` None leaves it to the backend's
    default; ``text_output`` False asks gRPC for the counts alone (HTTP's generate always returns every output)."""

    prompt: str
    sampling: dict[str, Any]
    stream: bool = True
    exclude_input_in_output: bool | None = True
    returned: tuple[str, ...] = RETURNED_OUTPUTS
    text_output: bool = True

    def flags(self) -> dict[str, bool]:
        """The backend's BOOL inputs."""
        flags = {"stream": self.stream}
        if self.exclude_input_in_output is not None:
            flags["exclude_input_in_output"] = self.exclude_input_in_output
        flags.update({f"return_{name}": True for name in self.returned})
        return flags

    def http_body(self) -> dict[str, Any]:
        """The JSON body of Triton's generate and generate_stream."""
        return {"text_input": self.prompt, "sampling_parameters": self.sampling_json(), **self.flags()}

    def sampling_json(self) -> str:
        """vLLM's sampling parameters as the backend takes them: one JSON string."""
        return json.dumps(self.sampling)

    def output_names(self) -> tuple[str, ...]:
        """The outputs a gRPC request asks for (HTTP's generate returns every output)."""
        return (("text_output",) if self.text_output else ()) + self.returned


@dataclasses.dataclass(frozen=True, slots=True)
class GenerateResponse:
    """One response of the vLLM backend: its new text, and the outputs the request asked for (each response counts
    only its own new tokens). ``received``: time.perf_counter() when it arrived, for a client that measures. ``final``:
    the stream's last response, where the protocol says so (gRPC; over HTTP the stream's end says it)."""

    text: str = ""
    finish_reason: str | None = None
    num_input_tokens: int | None = None
    num_output_tokens: int | None = None
    final: bool = False
    received: float = 0.0

    @classmethod
    def from_json(cls, data: dict[str, Any], received: float) -> GenerateResponse:
        """A response of HTTP's generate extension, where each output is a value or a list of one."""
        reason = _first(data.get("finish_reason"))
        return cls(
            text=str(_first(data.get("text_output")) or ""),
            # The backend writes Python's None for a response that is not the last one.
            finish_reason=None if reason in (None, "None", "") else str(reason),
            num_input_tokens=_count(data.get("num_input_tokens")),
            num_output_tokens=_count(data.get("num_output_tokens")),
            received=received,
        )

    @classmethod
    def from_infer_result(cls, result: Any, request: GenerateRequest, received: float) -> GenerateResponse:
        """A response of the gRPC stream (tritonclient's InferResult); reads only the outputs asked for."""

        def text(name: str) -> str | None:
            array = result.as_numpy(name)
            value = array.flat[0] if array is not None and array.size else None
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

        def count(name: str) -> int | None:
            array = result.as_numpy(name) if name in request.returned else None
            return None if array is None else int(array.sum())

        reason = text("finish_reason") if "finish_reason" in request.returned else None
        final = result.get_response().parameters.get("triton_final_response")  # a decoupled model's last response
        return cls(
            text=(text("text_output") or "") if request.text_output else "",
            finish_reason=None if reason in (None, "None", "") else reason,
            num_input_tokens=count("num_input_tokens"),
            num_output_tokens=count("num_output_tokens"),
            final=final is not None and final.bool_param,
            received=received,
        )


def _first(value: Any) -> Any:
    while isinstance(value, list):
        if not value:
            return None
        value = value[0]
    return value


def _count(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, list):
        return sum(_count(v) or 0 for v in value)
    return int(value)


def server_words(raw: bytes) -> str:
    """The server's words in an error answer: Triton's ``{"error": ...}``, which generate_stream frames as an event."""
    text = raw.decode("utf-8", "replace").strip()
    if text.startswith("data:"):
        text = text[5:].strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text
    return str(data.get("error", data)) if isinstance(data, dict) else text


def _http_failed(url: str, what: str, status: int, body: bytes, hint: str | None = None) -> TritonAnswerError:
    words = server_words(body)
    message = f"{what} at {url} failed with HTTP {status}: {words}"
    return TritonAnswerError(message, hint, url=url, status=status, server_message=words)


def _stream_event(data: bytes, received: float, url: str) -> GenerateResponse:
    """One response's JSON (an event of generate_stream, or generate's answer); an error in it is raised."""
    try:
        event = json.loads(data)
    except ValueError:
        event = None
    if isinstance(event, dict) and "error" not in event:
        return GenerateResponse.from_json(event, received)
    if isinstance(event, dict):
        words, message, hint = str(event["error"]), "reported an error mid-stream", None
    else:
        words, message, hint = data[:200].decode("utf-8", "replace"), "sent a response that is not JSON", _NOT_TRITON
    raise TritonAnswerError(f"the server at {url} {message}: {words}", hint, url=url, status=None, server_message=words)


class ServerSentEvents:
    """The data of server-sent events from a stream's bytes as they come: ``feed`` returns the data of each event the
    bytes complete. An event ends at a blank line; its data is its ``data:`` lines joined by newlines; the other fields
    (event, id, retry, comments) are left out, as Triton sends none."""

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        *lines, self._pending = (self._pending + chunk).split(b"\n")
        events = []
        for line in lines:
            line = line.rstrip(b"\r")
            if not line:
                if self._data:
                    events.append(b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                self._data.append(line[6:] if line.startswith(b"data: ") else line[5:])
        return events

    def end(self) -> list[bytes]:
        """The last event, when the stream ended without the blank line after it."""
        return self.feed(b"\n\n") if self._pending or self._data else []


# -- HTTP --------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HttpAddress:
    """Where a server's HTTP endpoint is: ``url`` as given (errors name it; http:// when it has no scheme), parsed."""

    url: str
    https: bool
    host: str
    port: int | None
    prefix: str  # a path the server sits under (behind a proxy), "" mostly

    @classmethod
    def parse(cls, url: str) -> HttpAddress:
        parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
        try:
            port = parsed.port
        except ValueError:
            port = -1
        if parsed.scheme not in ("http", "https") or not parsed.hostname or port == -1:
            raise InferError(f"--url {url} is not an http(s) URL", hint=f"e.g. --url {DEFAULT_URL}")
        return cls(url, parsed.scheme == "https", parsed.hostname, port, parsed.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


@dataclasses.dataclass(frozen=True)
class HttpReply:
    status: int
    body: bytes


def _quoted(model: str) -> str:
    return urllib.parse.quote(model, safe="")


def _reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


class TritonHttp:
    """Triton's HTTP endpoint at ``url`` (http://HOST:PORT). Each call is one request on a connection of its own;
    ``timeout`` is the default seconds to wait for an answer. Nothing answering raises TritonUnreachable."""

    def __init__(self, url: str, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        self.address = HttpAddress.parse(url)
        self.url = url
        self.timeout = timeout

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.address.https else http.client.HTTPConnection
        return cls(self.address.host, self.address.port, timeout=self.timeout if timeout is None else timeout)

    def _send(self, conn: http.client.HTTPConnection, method: str, path: str, body: Any) -> http.client.HTTPResponse:
        payload = None if body is None else json.dumps(body).encode()
        headers = {} if payload is None else {"Content-Type": "application/json"}
        try:
            conn.request(method, self.address.prefix + path, body=payload, headers=headers)
            return conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            raise TritonUnreachable(self.url, _reason(exc)) from None

    def request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> HttpReply:
        """One request (``body``: JSON to send) and its whole answer, whatever its status."""
        conn = self._connection(timeout)
        try:
            response = self._send(conn, method, path, body)
            return HttpReply(response.status, response.read())
        except (OSError, http.client.HTTPException) as exc:
            raise TritonUnreachable(self.url, _reason(exc)) from None
        finally:
            conn.close()

    def _ok(self, path: str) -> bool:
        return self.request("GET", path).status == 200

    def server_live(self) -> bool:
        return self._ok("/v2/health/live")

    def server_ready(self) -> bool:
        """Whether the server is ready: it is up and done loading the models it loads at startup."""
        return self._ok("/v2/health/ready")

    def model_ready(self, model: str) -> bool:
        return self._ok(f"/v2/models/{_quoted(model)}/ready")

    def _failed(self, what: str, reply: HttpReply, hint: str | None = None) -> TritonAnswerError:
        return _http_failed(self.url, what, reply.status, reply.body, hint)

    def repository_index(self, timeout: float | None = None) -> list[ModelEntry]:
        """Every model of the server's repository with its state and Triton's reason for it."""
        reply = self.request("POST", "/v2/repository/index", {}, timeout)
        if reply.status != 200:
            raise self._failed("the repository index", reply, _NOT_TRITON)
        try:
            index = json.loads(reply.body or b"[]")
        except ValueError:
            index = None
        if not isinstance(index, list):
            raise TritonAnswerError(
                f"the repository index at {self.url} is not Triton's (a JSON list)",
                _NOT_TRITON,
                url=self.url,
                status=reply.status,
                server_message=reply.body[:200].decode("utf-8", "replace"),
            )
        return [ModelEntry.from_json(m) for m in index if isinstance(m, dict) and "name" in m]

    def model_state(self, model: str, timeout: float | None = None) -> str | None:
        """The model's state in the repository index (READY, UNLOADING, UNAVAILABLE...), None when it is not there."""
        return next((m.state for m in self.repository_index(timeout) if m.name == model), None)

    def load_model(self, model: str, timeout: float | None = None) -> None:
        """(Re)load ``model`` from its files as they are now, returning once it is ready; else Triton's reason."""
        reply = self.request("POST", f"/v2/repository/models/{_quoted(model)}/load", {}, timeout)
        if reply.status != 200:
            raise self._failed(f"loading model '{model}'", reply, _MODEL_CONTROL_HINT)

    def unload_model(self, model: str, timeout: float | None = None) -> None:
        """Unload ``model``: Triton answers once it began; the index says UNLOADING until it is done."""
        reply = self.request("POST", f"/v2/repository/models/{_quoted(model)}/unload", {}, timeout)
        if reply.status != 200:
            raise self._failed(f"unloading model '{model}'", reply, _MODEL_CONTROL_HINT)

    def _generate(
        self, model: str, body: dict[str, Any], endpoint: str, timeout: float
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = self._connection(timeout)
        response = self._send(conn, "POST", f"/v2/models/{_quoted(model)}/{endpoint}", body)
        if response.status != 200:
            try:
                reply = HttpReply(response.status, response.read())
            except (OSError, http.client.HTTPException):
                reply = HttpReply(response.status, b"")
            conn.close()
            raise self._failed(f"{endpoint} of model '{model}'", reply)
        return conn, response

    def generate(self, model: str, body: dict[str, Any], timeout: float = GENERATE_TIMEOUT_S) -> GenerateResponse:
        """Triton's generate: the whole completion in one response (``body``: GenerateRequest.http_body())."""
        conn, response = self._generate(model, body, "generate", timeout)
        try:
            return _stream_event(response.read(), time.perf_counter(), self.url)
        except (OSError, http.client.HTTPException) as exc:
            raise TritonUnreachable(self.url, _reason(exc)) from None
        finally:
            conn.close()

    def generate_stream(
        self, model: str, body: dict[str, Any], timeout: float = GENERATE_TIMEOUT_S
    ) -> Iterator[GenerateResponse]:
        """Triton's generate_stream: each response as its server-sent event arrives. An error event raises
        TritonAnswerError (status None) with the server's words."""
        conn, response = self._generate(model, body, "generate_stream", timeout)
        events = ServerSentEvents()
        try:
            for line in response:
                received = time.perf_counter()
                for data in events.feed(line):
                    yield _stream_event(data, received, self.url)
            for data in events.end():
                yield _stream_event(data, time.perf_counter(), self.url)
        except (OSError, http.client.HTTPException) as exc:
            raise TritonUnreachable(self.url, f"the stream broke: {_reason(exc)}") from None
        finally:
            conn.close()


def answers_openai_api(url: str) -> bool:
    """Whether ``url`` answers as an OpenAI API (vllm-repo openai, launch --openai-port, vllm serve): a model list at
    /v1/models, or a demand for an API key there. For telling a user who gave that address where Triton's is."""
    try:
        reply = TritonHttp(url).request("GET", "/v1/models")
        return reply.status == 401 or (reply.status == 200 and json.loads(reply.body).get("object") == "list")
    except (InferError, ValueError, AttributeError):
        return False


# -- HTTP on asyncio: one keep-alive connection ------------------------------------------------------------------------


class GenerateStreamConnection:
    """One HTTP/1.1 keep-alive connection to Triton's generate_stream, on asyncio streams alone (no aiohttp): it parses
    the chunked answer and its server-sent events itself, so that a load generator's cost per response stays small.
    Requests on it run one after another; one whose answer was not read to its end closes the connection, and the next
    request opens another."""

    def __init__(self, url: str) -> None:
        self.address = HttpAddress.parse(url)
        self.url = url
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._reusable = False

    async def close(self) -> None:
        writer, self._writer, self._reader, self._reusable = self._writer, None, None, False
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if not self._reusable or self._writer is None or self._writer.is_closing():
            await self.close()
            port = self.address.port or (443 if self.address.https else 80)
            try:
                self._reader, self._writer = await asyncio.open_connection(
                    self.address.host, port, ssl=True if self.address.https else None
                )
            except OSError as exc:
                raise TritonUnreachable(self.url, _reason(exc)) from None
        assert self._reader is not None and self._writer is not None
        self._reusable = False  # until this request's answer has been read to its end
        return self._reader, self._writer

    async def generate_stream(self, model: str, body: dict[str, Any]) -> AsyncGenerator[GenerateResponse, None]:
        """POST ``body`` to /v2/models/MODEL/generate_stream; yields each response as its bytes are read. An HTTP error
        or an error event raises TritonAnswerError; a connection that breaks, TritonUnreachable."""
        reader, writer = await self._connect()
        payload = json.dumps(body).encode()
        head = (
            f"POST {self.address.prefix}/v2/models/{_quoted(model)}/generate_stream HTTP/1.1\r\n"
            f"Host: {self.address.host_header}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        ).encode()
        try:
            writer.write(head + payload)
            status, headers = await self._head(reader)
            ends = "content-length" in headers or "chunked" in headers.get("transfer-encoding", "")
            keep_alive = ends and headers.get("connection", "").lower() != "close"  # the next request may use it
            if status != 200:
                raw = b"".join([chunk async for chunk, _ in _body(reader, headers)])
                self._reusable = keep_alive
                raise _http_failed(self.url, f"generate_stream of model '{model}'", status, raw)
            events = ServerSentEvents()
            async for chunk, received in _body(reader, headers):
                for data in events.feed(chunk):
                    yield _stream_event(data, received, self.url)
            for data in events.end():
                yield _stream_event(data, time.perf_counter(), self.url)
            self._reusable = keep_alive
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            await self.close()
            raise TritonUnreachable(self.url, f"the connection broke: {_reason(exc)}") from None

    async def _head(self, reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
        line = await reader.readline()
        if not line.startswith(b"HTTP/1."):
            raise ConnectionError(f"no HTTP answer ({line[:80]!r})" if line else "closed before answering")
        status = int(line.split()[1])
        headers: dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                return status, headers
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()


async def _body(reader: asyncio.StreamReader, headers: dict[str, str]) -> AsyncIterator[tuple[bytes, float]]:
    """An answer's body (chunked, of a stated length, or to the end) as it comes, with perf_counter() at each piece."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers, then the blank line after the last chunk
                return
            chunk = await reader.readexactly(size)
            received = time.perf_counter()
            await reader.readexactly(2)
            yield chunk, received
    elif "content-length" in headers:
        yield await reader.readexactly(int(headers["content-length"])), time.perf_counter()
    else:
        while chunk := await reader.read(65536):
            yield chunk, time.perf_counter()


def ready_names(models: Sequence[ModelEntry]) -> list[str]:
    return sorted(m.name for m in models if m.ready)
