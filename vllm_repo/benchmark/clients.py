"""The load generator's clients: each sends one streamed request and returns its RequestRecord.

- NativeClient: Triton's own streaming contract over gRPC (serve/triton_grpc.py's TritonGrpc), as Triton's clients
  (perf_analyzer, genai-perf) drive the vLLM backend: requests on bidirectional streams that stay open, one request
  in flight on each, the backend's tensors (vllm_repo_backend/contract.py) in and ``num_output_tokens`` out with every
  response.
- OpenAIClient: the OpenAI API (vllm-repo's gateway, or any vllm serve) with streamed ``/v1/completions`` or
  ``/v1/chat/completions``, read as server-sent events the way vLLM's own benchmark client reads them; the output
  token count is the server's (``stream_options.include_usage``).

Both ask for exactly ``output_len`` tokens (max_tokens with ignore_eos) so runs compare. Each also offers
the server's own tokenizer (``tokenizer()``, vLLM's /tokenize and /detokenize, which the bundled backend answers over
either endpoint), so that synthetic prompts have exactly the length asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.parse
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from vllm_repo.benchmark.errors import BenchError
from vllm_repo.benchmark.stats import RequestRecord
from vllm_repo.serve.errors import InferError, TritonAnswerError, TritonUnreachable
from vllm_repo.serve.ports import DEFAULT_GRPC_PORT, DEFAULT_HOST, DEFAULT_OPENAI_PORT
from vllm_repo.serve.triton_client import GenerateRequest, TritonHttp, answers_openai_api, ready_names

if TYPE_CHECKING:
    from vllm_repo.serve.triton_grpc import TritonGrpc

ENDPOINTS = ("native", "openai", "openai-chat")
DEFAULT_URLS = {
    "native": f"{DEFAULT_HOST}:{DEFAULT_GRPC_PORT}",
    "openai": f"http://{DEFAULT_HOST}:{DEFAULT_OPENAI_PORT}",
    "openai-chat": f"http://{DEFAULT_HOST}:{DEFAULT_OPENAI_PORT}",
}
# A request that takes longer has failed (a stuck server must not hold the benchmark for ever).
REQUEST_TIMEOUT_S = 3600.0
# How long tokenization may take per call before the server counts as not offering it.
TOKENIZE_TIMEOUT_S = 60.0


class Activity:
    """When the client last heard from the server, and how many requests are waiting for it: a server whose process
    died mid-stream (Triton's stub, a crashed engine) may leave streams open that never end, and the benchmark must
    notice that rather than wait out REQUEST_TIMEOUT_S (run.guard)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.last = time.monotonic()

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Around one request, from sending it to its last response."""
        if self.in_flight == 0:
            self.last = time.monotonic()  # idle time before a request is not the server's silence
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    def heard(self) -> None:
        self.last = time.monotonic()

    def silent_for(self) -> float:
        """Seconds since the server last answered anything while requests were waiting (0 when none waits)."""
        return time.monotonic() - self.last if self.in_flight else 0.0


class Tokenizer(Protocol):
    async def encode(self, text: str, special: bool) -> list[int]: ...

    async def decode(self, ids: list[int]) -> str: ...


class Client(Protocol):
    endpoint: str
    url: str
    model: str
    activity: Activity

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def wait_ready(self, wait_s: float) -> None: ...

    async def send(self, prompt: str, output_len: int) -> RequestRecord: ...

    def tokenizer(self) -> Tokenizer: ...


def sampling(output_len: int) -> dict[str, Any]:
    """Exactly ``output_len`` tokens: with ignore_eos vLLM stops neither at the end-of-sequence token nor at the other
    end tokens of the model's generation_config. min_tokens would say the same at a cost: vLLM masks the stop tokens
    with a logits processor at every step, which vllm bench serve does not pay either."""
    return {"max_tokens": output_len, "ignore_eos": True}


def make_client(endpoint: str, url: str | None, model: str, api_key: str | None = None) -> Client:
    if endpoint == "native":
        return NativeClient(url or DEFAULT_URLS[endpoint], model)
    if endpoint in ("openai", "openai-chat"):
        return OpenAIClient(url or DEFAULT_URLS[endpoint], model, chat=endpoint == "openai-chat", api_key=api_key)
    raise BenchError(f"--endpoint {endpoint} is not one of {', '.join(ENDPOINTS)}")


# ---------------------------------------------------------------------------------------------------------------------
# Native: Triton's gRPC streaming
# ---------------------------------------------------------------------------------------------------------------------


def grpc_address(url: str) -> str:
    """HOST:PORT of Triton's gRPC endpoint from --url (HOST:PORT, grpc://HOST:PORT or http://HOST:PORT)."""
    parsed = urllib.parse.urlsplit(url if "://" in url else f"grpc://{url}")
    try:
        port = parsed.port or DEFAULT_GRPC_PORT
    except ValueError as exc:
        raise BenchError(f"--url {url}: {exc}", hint=f"e.g. --url {DEFAULT_URLS['native']}") from None
    if parsed.scheme not in ("grpc", "http") or not parsed.hostname or parsed.path.strip("/"):
        raise BenchError(
            f"--url {url} is not the address of Triton's gRPC endpoint",
            hint=f"with --endpoint native, give HOST:PORT of the gRPC port (e.g. {DEFAULT_URLS['native']})",
        )
    host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
    return f"{host}:{port}"


class NativeClient:
    endpoint = "native"

    def __init__(self, url: str, model: str) -> None:
        self.url = grpc_address(url)
        self.model = model
        self.activity = Activity()
        self._triton: TritonGrpc | None = None
        self._openai: Any = None

    @property
    def triton(self) -> TritonGrpc:
        if self._triton is None:
            raise RuntimeError("open() the client before using it")
        return self._triton

    async def open(self) -> None:
        from vllm_repo.serve.triton_grpc import TritonGrpc  # tritonclient and grpc: the full extra's

        self._triton = TritonGrpc(self.url)

    async def close(self) -> None:
        if self._openai is not None:
            await self._openai.close()
        if self._triton is not None:
            await self._triton.close()

    async def wait_ready(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                if await self.triton.model_ready(self.model):
                    return
                live = True
            except TritonUnreachable:
                live = False
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.5)
        if not live:
            raise BenchError(f"no Triton gRPC endpoint answers at {self.url}", hint=_native_hint(self.url))
        try:
            names = ready_names(await self.triton.repository_index())
        except TritonUnreachable:
            names = []
        raise BenchError(
            f"the Triton server at {self.url} has no model '{self.model}' ready",
            hint=f"its models: {', '.join(names)}" if names else "--model is the model's directory in the repository",
        )

    @staticmethod
    def request(prompt: str, output_len: int) -> GenerateRequest:
        """The backend's inputs; only the token counts come back (no text: the client's cost per response counts)."""
        return GenerateRequest(
            prompt, sampling(output_len), returned=("num_input_tokens", "num_output_tokens"), text_output=False
        )

    async def send(self, prompt: str, output_len: int) -> RequestRecord:
        with self.activity.waiting():
            return await self._send(prompt, output_len)

    async def _send(self, prompt: str, output_len: int) -> RequestRecord:
        record = RequestRecord(start=time.perf_counter())
        last = record.start
        stream = self.triton.generate_stream(self.model, self.request(prompt, output_len), REQUEST_TIMEOUT_S)
        try:
            async for response in stream:
                self.activity.heard()
                tokens = response.num_output_tokens or 0
                if record.input_tokens is None and response.num_input_tokens is not None:
                    record.input_tokens = response.num_input_tokens
                if tokens:
                    if record.ttft is None:
                        record.ttft = response.received - record.start
                    else:
                        record.itl.append(response.received - last)
                    last = response.received
                    record.output_tokens += tokens
        except TritonAnswerError as exc:  # the server's error response
            record.error = exc.server_message
            return record
        except Exception as exc:  # the stream broke: the server went away, a gRPC error
            record.error = _one_line(exc)
            return record
        finally:
            await stream.aclose()
        return _finish(record, last)

    def tokenizer(self) -> Tokenizer:
        from vllm_repo.serve.openai.triton import TritonOpenAIClient

        if self._openai is None:
            self._openai = TritonOpenAIClient(self.url)
        return _NativeTokenizer(self._openai, self.model)


def _native_hint(address: str) -> str:
    try:
        answers_http = TritonHttp(f"http://{address}").server_ready()
    except InferError:
        answers_http = False
    if answers_http:
        return (
            f"{address} answers HTTP: that is Triton's HTTP port; --endpoint native speaks gRPC, give the gRPC port "
            f"(launch prints it; {DEFAULT_GRPC_PORT} by default)"
        )
    if answers_openai_api(f"http://{address}"):
        return f"{address} is an OpenAI API: use --endpoint openai (or openai-chat) for it"
    return "start a server with `vllm-repo launch REPO` (its gRPC port is the one to give), or bench REPO itself"


def _finish(record: RequestRecord, last: float) -> RequestRecord:
    if record.ttft is None:
        record.error = record.error or "the stream ended without any generated token"
        return record
    record.e2e = last - record.start
    record.ok = True
    return record


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


class _NativeTokenizer:
    """vLLM's /tokenize and /detokenize through the backend's OpenAI input, over Triton's gRPC."""

    def __init__(self, client: Any, model: str) -> None:
        self._client, self._model = client, model

    async def _call(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        status, raw = None, b""
        async for chunk in self._client.call(self._model, endpoint, body):
            status = chunk.status if chunk.status is not None else status
            raw += chunk.body
        if status != 200:
            raise BenchError(f"{endpoint} answered {status}: {raw[:200].decode('utf-8', 'replace')}")
        answer: dict[str, Any] = json.loads(raw)
        return answer

    async def encode(self, text: str, special: bool) -> list[int]:
        answer = await self._call("/tokenize", {"model": self._model, "prompt": text, "add_special_tokens": special})
        return list(answer["tokens"])

    async def decode(self, ids: list[int]) -> str:
        return str((await self._call("/detokenize", {"model": self._model, "tokens": ids}))["prompt"])


# ---------------------------------------------------------------------------------------------------------------------
# OpenAI: streamed completions and chat completions
# ---------------------------------------------------------------------------------------------------------------------


def openai_root(url: str) -> str:
    """http(s)://HOST:PORT of an OpenAI API from --url (with or without /v1)."""
    parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise BenchError(f"--url {url} is not an http(s) URL", hint=f"e.g. --url {DEFAULT_URLS['openai']}")
    path = parsed.path.rstrip("/")
    path = path[: -len("/v1")] if path.endswith("/v1") else path
    return urllib.parse.urlunsplit((parsed.scheme, parsed.netloc, path, "", ""))


class OpenAIClient:
    def __init__(self, url: str, model: str, chat: bool = False, api_key: str | None = None) -> None:
        self.url = openai_root(url)
        self.model = model
        self.chat = chat
        self.endpoint = "openai-chat" if chat else "openai"
        self.route = "/v1/chat/completions" if chat else "/v1/completions"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.activity = Activity()
        self._session: Any = None

    async def open(self) -> None:
        import aiohttp

        # No limit on connections: the load point's concurrency is the limit, not the client's pool.
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        self._session = aiohttp.ClientSession(connector=connector, timeout=timeout, headers=self._headers)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def wait_ready(self, wait_s: float) -> None:
        import aiohttp

        deadline = time.monotonic() + wait_s
        status, models = 0, []
        while True:
            try:
                async with self._session.get(f"{self.url}/v1/models") as response:
                    status = response.status
                    if status == 200:
                        models = [m.get("id") for m in (await response.json()).get("data", [])]
                        if self.model in models:
                            return
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
                status = 0
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.5)
        if status == 401:
            raise BenchError(f"the OpenAI API at {self.url} wants an API key", hint="give it with --api-key KEY")
        if status != 200:
            raise BenchError(
                f"no OpenAI API answers at {self.url}/v1/models" + (f" (HTTP {status})" if status else ""),
                hint="start one with `vllm-repo launch REPO --openai-port PORT` (or bench REPO itself); with "
                "--endpoint native, give Triton's gRPC address instead",
            )
        raise BenchError(
            f"the OpenAI API at {self.url} serves no model '{self.model}'",
            hint=f"its models: {', '.join(map(str, models))}" if models else None,
        )

    def body(self, prompt: str, output_len: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            **sampling(output_len),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.chat:
            body["messages"] = [{"role": "user", "content": prompt}]
        else:
            body["prompt"] = prompt
        return body

    async def send(self, prompt: str, output_len: int) -> RequestRecord:
        with self.activity.waiting():
            return await self._send(prompt, output_len)

    async def _send(self, prompt: str, output_len: int) -> RequestRecord:
        record = RequestRecord(start=time.perf_counter())
        last = record.start
        counted = 0  # output-bearing chunks, the count where the server sends no usage
        try:
            async with self._session.post(self.url + self.route, json=self.body(prompt, output_len)) as response:
                if response.status != 200:
                    record.error = f"HTTP {response.status}: {_error_text(await response.read())}"
                    return record
                async for raw in response.content:
                    self.activity.heard()
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        # Read on to the body's end (it follows at once): leaving earlier closes the connection
                        # under the server's last write instead of keeping it for the next request.
                        continue
                    now = time.perf_counter()
                    event = json.loads(data)
                    if "error" in event:
                        record.error = f"error mid-stream: {_error_text(data)}"
                        return record
                    if event.get("choices") and not _only_role(event["choices"][0]):
                        if record.ttft is None:
                            record.ttft = now - record.start
                        else:
                            record.itl.append(now - last)
                        last = now
                        counted += 1
                    usage = event.get("usage")
                    if usage:
                        record.output_tokens = int(usage.get("completion_tokens") or 0)
                        record.input_tokens = usage.get("prompt_tokens")
        except Exception as exc:  # connection refused or reset, a timeout, a body that is not JSON
            record.error = _one_line(exc)
            return record
        record.output_tokens = record.output_tokens or counted
        return _finish(record, last)

    def tokenizer(self) -> Tokenizer:
        return _OpenAITokenizer(self)

    async def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=TOKENIZE_TIMEOUT_S)
        async with self._session.post(self.url + path, json=body, timeout=timeout) as response:
            if response.status != 200:
                raise BenchError(f"{path} answered HTTP {response.status}: {_error_text(await response.read())}")
            answer: dict[str, Any] = await response.json()
            return answer


def _only_role(choice: dict[str, Any]) -> bool:
    """A chat stream's first chunk, which opens the assistant's message with no token in it: vLLM sends it just before
    the first token's chunk, so it is neither the first token nor a gap between tokens."""
    delta = choice.get("delta")
    return (
        isinstance(delta, dict) and set(delta) <= {"role", "content"} and not delta.get("content") and "role" in delta
    )


def _error_text(raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:300]
    error = data.get("error", data) if isinstance(data, dict) else data
    message = error.get("message", error) if isinstance(error, dict) else error
    return str(message)[:300]


class _OpenAITokenizer:
    def __init__(self, client: OpenAIClient) -> None:
        self._client = client

    async def encode(self, text: str, special: bool) -> list[int]:
        body = {"model": self._client.model, "prompt": text, "add_special_tokens": special}
        return list((await self._client.post_json("/tokenize", body))["tokens"])

    async def decode(self, ids: list[int]) -> str:
        body = {"model": self._client.model, "tokens": ids}
        return str((await self._client.post_json("/detokenize", body))["prompt"])
