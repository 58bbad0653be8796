"""infer: send one prompt to a model served by Triton's vLLM backend and stream the completion as it arrives.

Uses Triton's HTTP generate extension: ``POST /v2/models/<model>/generate_stream`` answers with server-sent events, one
``data: {...}`` line per response, each carrying only the new text. ``max_tokens`` is always sent: vLLM's own default
is 16 tokens, which silently cuts completions short.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import re
import socket
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from vllm_repo.errors import UsageError
from vllm_repo.serve.errors import InferError
from vllm_repo.serve.ports import DEFAULT_URL

DEFAULT_MAX_TOKENS = 256


@dataclasses.dataclass
class Completion:
    text: str = ""
    finish_reason: str | None = None
    num_input_tokens: int | None = None
    num_output_tokens: int | None = None
    responses: int = 0  # how many responses (SSE events) carried it

    def outputs(self) -> dict[str, Any]:
        return {
            "finish_reason": self.finish_reason,
            "num_input_tokens": self.num_input_tokens,
            "num_output_tokens": self.num_output_tokens,
            "responses": self.responses,
        }


# Control characters a terminal would act on (ESC sequences, bells, backspaces, carriage returns), as a random model's
# tokens can hold: every character of Unicode's Cc category but the newline and the tab.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` with the control characters a terminal would act on written as escapes (``\\x1b``), so that
    generated text cannot move the cursor, clear the screen or garble what follows."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def parse_param(text: str) -> tuple[str, Any]:
    """--param KEY=VALUE: the value as JSON when it parses (0.7, 40, true, ["\\n"]), else as a string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"--param '{text}' is not KEY=VALUE", hint="e.g. --param temperature=0.7")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def request_body(
    prompt: str, *, stream: bool, max_tokens: int, params: dict[str, Any] | None = None, outputs: bool = True
) -> dict[str, Any]:
    sampling = {"max_tokens": max_tokens, **(params or {})}
    body: dict[str, Any] = {
        "text_input": prompt,
        "stream": stream,
        # The prompt is the caller's own text; only the completion comes back.
        "exclude_input_in_output": True,
        # The backend takes sampling parameters as one JSON string.
        "sampling_parameters": json.dumps(sampling),
    }
    if outputs:
        body.update(return_finish_reason=True, return_num_input_tokens=True, return_num_output_tokens=True)
    return body


def _first(value: Any) -> Any:
    while isinstance(value, list):
        if not value:
            return None
        value = value[0]
    return value


def _merge(completion: Completion, event: dict[str, Any]) -> str:
    """Fold one response into the completion; returns its new text."""
    piece = _first(event.get("text_output")) or ""
    completion.text += piece
    completion.responses += 1
    reason = _first(event.get("finish_reason"))
    if reason not in (None, "None", ""):
        completion.finish_reason = str(reason)
    if event.get("num_input_tokens") is not None:
        completion.num_input_tokens = int(_first(event["num_input_tokens"]))
    if event.get("num_output_tokens") is not None:
        # Each response counts only its own new tokens.
        completion.num_output_tokens = (completion.num_output_tokens or 0) + int(_first(event["num_output_tokens"]))
    return piece


def _connect(url: str, timeout: float) -> tuple[http.client.HTTPConnection, str]:
    parsed = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise InferError(f"--url {url} is not an http(s) URL", hint=f"e.g. --url {DEFAULT_URL}")
    cls = http.client.HTTPSConnection if parsed.scheme == "https" else http.client.HTTPConnection
    return cls(parsed.hostname, parsed.port, timeout=timeout), parsed.path.rstrip("/")


def _error_text(raw: bytes) -> str:
    """The server's own words from an error answer: generate_stream frames even its error as an SSE event."""
    text = raw.decode("utf-8", "replace").strip()
    if text.startswith("data:"):
        text = text[5:].strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text
    return str(data.get("error", data)) if isinstance(data, dict) else text


def _request(url: str, path: str, method: str = "GET", timeout: float = 5.0) -> tuple[int, bytes]:
    """One request to the server; (0, b"") when nothing answers (refused, unresolvable, timed out)."""
    conn, prefix = _connect(url, timeout)
    try:
        conn.request(method, prefix + path, body=None)
        resp = conn.getresponse()
        return resp.status, resp.read()
    except OSError:
        return 0, b""
    finally:
        conn.close()


def _is_openai_api(url: str) -> bool:
    """Whether ``url`` answers as an OpenAI API (vllm-repo openai, launch --openai-port, vllm serve): a model list at
    /v1/models. Asked only after Triton's route was not found there."""
    status, raw = _request(url, "/v1/models")
    try:
        return status in (200, 401) and (status == 401 or json.loads(raw).get("object") == "list")
    except (ValueError, AttributeError):
        return False


def repository_index(url: str) -> list[dict[str, Any]]:
    """Every model of the server's repository with its state ("READY", "UNAVAILABLE", ...) and the reason Triton gives
    for it (Triton's repository index), [] when it can't say."""
    status, raw = _request(url, "/v2/repository/index", "POST")
    try:
        index = json.loads(raw) if status == 200 else []
    except ValueError:
        return []
    return [m for m in index if isinstance(m, dict) and "name" in m] if isinstance(index, list) else []


def loaded_models(url: str) -> list[str]:
    """The models the server has ready (Triton's repository index), [] when it can't say."""
    return sorted(m["name"] for m in repository_index(url) if m.get("state") == "READY")


def wait_until_ready(
    url: str, model: str, wait: float, on_wait: Callable[[str], None] | None = None, poll: float = 1.0
) -> None:
    """Wait up to ``wait`` seconds for ``model`` to be ready: while launch is still loading it, Triton answers
    nothing (its endpoints open once the models are loaded) or says the model is not ready yet."""
    deadline = time.monotonic() + wait
    path = f"/v2/models/{urllib.parse.quote(model, safe='')}/ready"
    said = False
    while True:
        status, _ = _request(url, path)
        if status == 200:
            return
        if status and _request(url, "/v2/health/ready")[0] == 200:
            # The server is up and done loading, and this model is not among its models.
            raise unknown_model(url, model)
        if time.monotonic() >= deadline:
            what = f"no Triton server answers at {url}" if not status else f"model '{model}' is not ready at {url}"
            raise InferError(f"{what} after waiting {wait:g} s", hint=NO_SERVER_HINT)
        if on_wait and not said:
            on_wait(f"waiting up to {wait:g} s for model '{model}' at {url} to be ready ...")
            said = True
        time.sleep(poll)


NO_SERVER_HINT = (
    "if `vllm-repo launch` is still loading the model, wait for its 'Triton is ready' line or pass --wait SECONDS; "
    "otherwise start one with `vllm-repo launch REPO`, or pass --url"
)


def unknown_model(url: str, model: str, detail: str = "") -> InferError:
    index = repository_index(url)
    entry = next((m for m in index if m["name"] == model), None)
    if entry is not None and entry.get("state") != "READY":
        # In the repository but not loaded: Triton's own answer is the same "unknown model" as for a typo.
        state = ", ".join(str(entry[k]) for k in ("state", "reason") if entry.get(k)) or "not ready"
        return InferError(
            f"model '{model}' at {url} is not loaded (Triton: {state})",
            hint=f"a vLLM model whose engine died is unloaded when its config.pbtxt sets ENABLE_VLLM_HEALTH_CHECK: "
            f"`vllm-repo doctor --url {url}` reads why from the server log; load it again (POST "
            f"{url.rstrip('/')}/v2/repository/models/{model}/load) or restart the server",
        )
    names = sorted(m["name"] for m in index if m.get("state") == "READY")
    return InferError(
        f"the server at {url} has no model '{model}'" + (f": {detail}" if detail else ""),
        hint=f"its models: {', '.join(names)}" if names else "the model names are the directories of the repository",
    )


def stream_events(
    url: str, model: str, body: dict[str, Any], *, stream: bool, timeout: float = 600.0
) -> Iterator[dict[str, Any]]:
    """POST the request and yield each response's JSON (one for generate, one per SSE event for generate_stream)."""
    conn, prefix = _connect(url, timeout)
    endpoint = "generate_stream" if stream else "generate"
    path = f"{prefix}/v2/models/{urllib.parse.quote(model, safe='')}/{endpoint}"
    try:
        try:
            conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
        except (TimeoutError, ConnectionRefusedError, socket.gaierror, OSError) as exc:
            raise InferError(f"no Triton server answers at {url} ({exc.strerror or exc})", hint=NO_SERVER_HINT) from exc
        if resp.status != 200:
            message = _error_text(resp.read())
            if resp.status == 404 and _is_openai_api(url):
                raise InferError(
                    f"{url} is the OpenAI API, not Triton's HTTP endpoint ({endpoint} is Triton's)",
                    hint="give --url Triton's HTTP port (launch prints it: HTTP http://127.0.0.1:8000 by default), "
                    "or use an OpenAI client on this one (e.g. curl {url}/v1/completions)".replace("{url}", url),
                )
            if resp.status in (400, 404) and ("unknown model" in message or "not found" in message):
                raise unknown_model(url, model, message)
            raise InferError(f"{endpoint} failed with HTTP {resp.status}: {message}")
        if not stream:
            yield json.loads(resp.read())
            return
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            event = json.loads(line[5:].strip())
            if "error" in event:
                raise InferError(f"the server reported an error mid-stream: {event['error']}")
            yield event
    finally:
        conn.close()


def infer(
    model: str,
    prompt: str,
    *,
    url: str = DEFAULT_URL,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    stream: bool = True,
    params: dict[str, Any] | None = None,
    on_text: Callable[[str], None] | None = None,
    timeout: float = 600.0,
    wait: float = 0.0,
    on_wait: Callable[[str], None] | None = None,
) -> Completion:
    """Run one completion; ``on_text`` receives each piece of text as it arrives. Returns the whole completion with
    its finish reason and token counts. ``wait``: seconds to wait first for the model to be ready (a launch that is
    still loading)."""
    if max_tokens < 1:
        raise InferError(f"--max-tokens must be at least 1, not {max_tokens}")
    if params and "max_tokens" in params:
        raise InferError("give max_tokens with --max-tokens, not --param")
    body = request_body(prompt, stream=stream, max_tokens=max_tokens, params=params)
    if wait > 0:
        wait_until_ready(url, model, wait, on_wait)
    completion = Completion()
    for event in stream_events(url, model, body, stream=stream, timeout=timeout):
        piece = _merge(completion, event)
        if piece and on_text:
            on_text(piece)
    return completion
