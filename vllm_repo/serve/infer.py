"""infer: send one prompt to a model served by Triton's vLLM backend and stream the completion as it arrives.

Uses Triton's HTTP generate extension through serve/triton_client.py: ``POST /v2/models/<model>/generate_stream``
answers with server-sent events, one ``data: {...}`` line per response, each carrying only the new text.
``max_tokens`` is always sent: vLLM's own default is 16 tokens, which silently cuts completions short.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

from vllm_repo.errors import UsageError
from vllm_repo.serve.errors import InferError, TritonAnswerError, TritonUnreachable
from vllm_repo.serve.ports import DEFAULT_URL
from vllm_repo.serve.triton_client import (
    RETURNED_OUTPUTS,
    GenerateRequest,
    GenerateResponse,
    ModelEntry,
    TritonHttp,
    answers_openai_api,
    ready_names,
)

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


def generate_request(
    prompt: str, *, stream: bool, max_tokens: int, params: dict[str, Any] | None = None
) -> GenerateRequest:
    """The request infer sends: the completion alone (the prompt is the caller's own text), with its finish reason and
    token counts."""
    sampling = {"max_tokens": max_tokens, **(params or {})}
    return GenerateRequest(prompt, sampling, stream=stream, exclude_input_in_output=True, returned=RETURNED_OUTPUTS)


def _merge(completion: Completion, response: GenerateResponse) -> str:
    """Fold one response into the completion; returns its new text."""
    completion.text += response.text
    completion.responses += 1
    if response.finish_reason is not None:
        completion.finish_reason = response.finish_reason
    if response.num_input_tokens is not None:
        completion.num_input_tokens = response.num_input_tokens
    if response.num_output_tokens is not None:
        # Each response counts only its own new tokens.
        completion.num_output_tokens = (completion.num_output_tokens or 0) + response.num_output_tokens
    return response.text


def repository_index(url: str) -> list[ModelEntry]:
    """Every model of the server's repository with its state ("READY", "UNAVAILABLE", ...) and the reason Triton gives
    for it (Triton's repository index), [] when it can't say."""
    try:
        return TritonHttp(url).repository_index()
    except InferError:
        return []


def loaded_models(url: str) -> list[str]:
    """The models the server has ready (Triton's repository index), [] when it can't say."""
    return ready_names(repository_index(url))


def wait_until_ready(
    url: str, model: str, wait: float, on_wait: Callable[[str], None] | None = None, poll: float = 1.0
) -> None:
    """Wait up to ``wait`` seconds for ``model`` to be ready: while launch is still loading it, Triton answers
    nothing (its endpoints open once the models are loaded) or says the model is not ready yet."""
    deadline = time.monotonic() + wait
    server = TritonHttp(url)
    said = False
    while True:
        answered = done_loading = False
        try:
            if server.model_ready(model):
                return
            answered = True
            done_loading = server.server_ready()
        except TritonUnreachable:
            pass
        if done_loading:
            # The server is up and done loading, and this model is not among its models.
            raise unknown_model(url, model)
        if time.monotonic() >= deadline:
            what = f"no Triton server answers at {url}" if not answered else f"model '{model}' is not ready at {url}"
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
    entry = next((m for m in index if m.name == model), None)
    if entry is not None and not entry.ready:
        # In the repository but not loaded: Triton's own answer is the same "unknown model" as for a typo.
        state = ", ".join(v for v in (entry.state, entry.reason) if v) or "not ready"
        return InferError(
            f"model '{model}' at {url} is not loaded (Triton: {state})",
            hint=f"a vLLM model whose engine died is unloaded when its config.pbtxt sets ENABLE_VLLM_HEALTH_CHECK: "
            f"`vllm-repo doctor --url {url}` reads why from the server log; load it again (POST "
            f"{url.rstrip('/')}/v2/repository/models/{model}/load) or restart the server",
        )
    names = ready_names(index)
    return InferError(
        f"the server at {url} has no model '{model}'" + (f": {detail}" if detail else ""),
        hint=f"its models: {', '.join(names)}" if names else "the model names are the directories of the repository",
    )


def stream_events(
    url: str, model: str, body: dict[str, Any], *, stream: bool, timeout: float = 600.0
) -> Iterator[GenerateResponse]:
    """POST the request and yield each response (one for generate, one per SSE event for generate_stream); an error
    answer is explained in the terms of infer (which address to give, which model is missing and why)."""
    server = TritonHttp(url)
    endpoint = "generate_stream" if stream else "generate"
    try:
        if stream:
            yield from server.generate_stream(model, body, timeout)
        else:
            yield server.generate(model, body, timeout)
    except TritonUnreachable as exc:
        raise TritonUnreachable(url, exc.reason, hint=NO_SERVER_HINT) from None
    except TritonAnswerError as exc:
        if exc.status == 404 and answers_openai_api(url):
            raise InferError(
                f"{url} is the OpenAI API, not Triton's HTTP endpoint ({endpoint} is Triton's)",
                hint="give --url Triton's HTTP port (launch prints it: HTTP http://127.0.0.1:8000 by default), "
                "or use an OpenAI client on this one (e.g. curl {url}/v1/completions)".replace("{url}", url),
            ) from None
        words = exc.server_message
        if exc.status in (400, 404) and ("unknown model" in words or "not found" in words):
            raise unknown_model(url, model, words) from None
        raise


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
    body = generate_request(prompt, stream=stream, max_tokens=max_tokens, params=params).http_body()
    if wait > 0:
        wait_until_ready(url, model, wait, on_wait)
    completion = Completion()
    for response in stream_events(url, model, body, stream=stream, timeout=timeout):
        piece = _merge(completion, response)
        if piece and on_text:
            on_text(piece)
    return completion
