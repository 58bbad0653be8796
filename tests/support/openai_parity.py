"""The requests an OpenAI-compatible server must answer exactly as ``vllm serve`` does, and what is compared.

``run_all(base_url)`` sends every request of REQUESTS with the official ``openai`` SDK (the Anthropic Messages API's
with the official ``anthropic`` SDK), one at a time, and returns an Observation per request; ``compare(a, b)`` lists
where two runs differ. Streams are reassembled from their chunks, so only what a client gets in the end is compared
(texts, tool calls, finish reasons, logprobs, usage), plus the set of fields the answer carries. Ids, ``created``
timestamps and ``system_fingerprint`` differ by design and are left out.

The requests suit scripts/make_tiny_model.py's model served as ``tiny`` with max_model_len 512: random weights, so the
texts are noise, but greedy decoding (temperature 0) and seeded sampling make them a function of the server.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

MODEL = "tiny"
MAX_MODEL_LEN = 512
# The name the tiny model's LoRA adapter (tiny_lora) is served by, on both sides of the parity test.
ADAPTER = "tiny-adapter"

SYSTEM = {"role": "system", "content": "You are a terse assistant."}
USER = {"role": "user", "content": "Hello world! What is the capital of France?"}
CHAT = [SYSTEM, USER]
PROMPT = "Triton Inference Server serves models over HTTP and gRPC."

# Small tools: at about 1.5 characters a token, the tiny model's tokenizer would fill the 512-token context with a
# usual tool definition. Enums keep the constrained arguments short whatever the random weights prefer.
# vLLM constrains a forced call's arguments to the tool's schema only for a tool marked strict (else the call's
# envelope alone: the tiny model then writes arguments such as 100.7); TIME_TOOL is left loose for that path.
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Weather in a city",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Lima"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
            "required": ["zone"],
        },
    },
}
TOOLS = [WEATHER_TOOL, TIME_TOOL]

CITY_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Tokyo", "Lima"]},
        "sunny": {"type": "boolean"},
    },
    "required": ["city", "sunny"],
    "additionalProperties": False,
}

# Prompts over max_model_len: vLLM refuses the first by its length in characters before tokenizing (more than 17
# per token of the context), the second (about 660 tokens) after.
LONG_PROMPT = "The quick brown fox jumps over the lazy dog. " * 200
OVER_CONTEXT_PROMPT = "The quick brown fox jumps over the lazy dog. " * 60

CITY_FORMAT = {"type": "json_schema", "json_schema": {"name": "city", "schema": CITY_SCHEMA, "strict": True}}

# A conversation with a tool call and its result, as a client sends it back after running the tool.
TOOL_ROUND_TRIP = [
    SYSTEM,
    {"role": "user", "content": "What is the weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21, "sky": "clear"}'},
]


@dataclass(frozen=True)
class Request:
    """One request: ``endpoint`` is "chat", "completions", "responses" or "models", sent with the openai SDK,
    "messages", sent with the anthropic SDK (vllm serve's Anthropic Messages API), or "http", a
    plain HTTP request (``method`` on ``path``, from the server's root) for what the SDK has no call for; ``body``
    the SDK call's arguments (vLLM's own parameters go in ``extra_body``, as the SDK wants them) or the JSON body;
    ``expect_status`` the HTTP status vLLM answers with; ``headers`` sent besides the client's own (replacing them
    where the names match)."""

    name: str
    endpoint: str
    body: dict | None = field(default_factory=dict)
    expect_status: int = 200
    headers: dict = field(default_factory=dict)
    method: str = "POST"
    path: str = ""

    @property
    def stream(self) -> bool:
        return bool((self.body or {}).get("stream"))


def _chat(name: str, expect_status: int = 200, headers: dict | None = None, **body: Any) -> Request:
    return Request(name, "chat", {"model": MODEL, "messages": CHAT, **body}, expect_status, headers or {})


def _conversation(name: str, messages: list[dict], expect_status: int = 200, **body: Any) -> Request:
    return Request(name, "chat", {"model": MODEL, "messages": messages, **body}, expect_status)


def _completion(name: str, expect_status: int = 200, headers: dict | None = None, **body: Any) -> Request:
    return Request(name, "completions", {"model": MODEL, "prompt": PROMPT, **body}, expect_status, headers or {})


def _responses(name: str, expect_status: int = 200, **body: Any) -> Request:
    return Request(name, "responses", {"model": MODEL, "input": USER["content"], **body}, expect_status)


def _messages(name: str, expect_status: int = 200, **body: Any) -> Request:
    body = {"model": MODEL, "system": SYSTEM["content"], "messages": [USER], **body}
    return Request(name, "messages", body, expect_status)


def _http(name: str, method: str, path: str, body: dict | None = None, expect_status: int = 200) -> Request:
    return Request(name, "http", body, expect_status, method=method, path=path)


def _named(function: str) -> dict:
    return {"type": "function", "function": {"name": function}}


def _both_ways(request: Request) -> list[Request]:
    """The request as it is and streamed (with usage), under ``NAME`` and ``NAME/stream``."""
    usage = {} if request.endpoint in ("responses", "messages") else {"stream_options": {"include_usage": True}}
    streamed = {**request.body, "stream": True, **usage}
    return [request, dataclasses.replace(request, name=f"{request.name}/stream", body=streamed)]


GREEDY = {"temperature": 0, "seed": 0}
SAMPLED = {"temperature": 0.9, "top_p": 0.95, "seed": 1234}

_SUCCESSES = [
    # chat
    _chat("chat/greedy", max_tokens=16, **GREEDY),
    _chat("chat/max_completion_tokens", max_completion_tokens=12, **GREEDY),
    _chat("chat/seeded", max_tokens=16, **SAMPLED),
    _chat("chat/n3-seeded", n=3, max_tokens=10, **SAMPLED),
    # Stop strings the tiny model writes within its first tokens at temperature 0; the second never matches.
    _chat("chat/stop", max_tokens=32, stop=[" 100", "#never#"], **GREEDY),
    _chat("chat/stop-unmatched", max_tokens=8, stop="#never#", **GREEDY),
    _chat("chat/logprobs", max_tokens=8, logprobs=True, top_logprobs=3, **GREEDY),
    _chat("chat/logprobs-seeded", max_tokens=8, logprobs=True, top_logprobs=2, **SAMPLED),
    _chat("chat/json_object", max_tokens=48, response_format={"type": "json_object"}, **GREEDY),
    # Greedy, the tiny model takes the whitespace JSON allows between tokens until max_tokens (the text is cut short,
    # still a parity check); seed 1 samples a complete object in 24 tokens.
    _chat("chat/json_schema", max_tokens=32, response_format=CITY_FORMAT, **GREEDY),
    _chat("chat/json_schema-seeded", max_tokens=64, response_format=CITY_FORMAT, temperature=1, seed=1),
    # Forced tool calls. As with json_schema, greedy decoding fills the arguments with whitespace until max_tokens
    # (vLLM then answers the raw text as content, or streams a partial call); seed 0 samples a complete call in about
    # 70 tokens. The prompt with both tools is about 400 tokens, so max_tokens stays at 100.
    _chat("chat/tool_named", max_tokens=100, tools=TOOLS, tool_choice=_named("weather"), temperature=1, seed=0),
    _chat("chat/tool_named-greedy", max_tokens=24, tools=TOOLS, tool_choice=_named("weather"), **GREEDY),
    _chat("chat/tool_named-loose", max_tokens=64, tools=TOOLS, tool_choice=_named("time"), **GREEDY),
    _chat("chat/tool_required", max_tokens=100, tools=TOOLS, tool_choice="required", temperature=1, seed=0),
    _chat("chat/tool_required-greedy", max_tokens=24, tools=TOOLS, tool_choice="required", **GREEDY),
    _chat("chat/tool_auto", max_tokens=16, tools=TOOLS, tool_choice="auto", **GREEDY),
    _conversation("chat/tool_result", TOOL_ROUND_TRIP, tools=[WEATHER_TOOL], max_tokens=12, **GREEDY),
    # vLLM renders a role it does not know with the chat template rather than refusing it.
    _conversation("chat/unknown-role", [{"role": "wizard", "content": "hi"}], max_tokens=4, **GREEDY),
    # completions
    _completion("completion/greedy", max_tokens=16, **GREEDY),
    _completion("completion/seeded", max_tokens=16, **SAMPLED),
    _completion("completion/n2-seeded", n=2, max_tokens=10, **SAMPLED),
    _completion("completion/stop", max_tokens=32, stop=["e"], **GREEDY),
    _completion("completion/logprobs", max_tokens=8, logprobs=3, **GREEDY),
    _completion("completion/echo", max_tokens=4, echo=True, logprobs=1, **GREEDY),
    _completion("completion/prompt-list", prompt=["Hello world!", "The quick brown fox"], max_tokens=6, **GREEDY),
    # vLLM names the answer after the client's X-Request-Id (chatcmpl-ID, cmpl-ID): the header reaches its app.
    _chat("chat/x-request-id", max_tokens=4, headers={"X-Request-Id": "parity-chat"}, **GREEDY),
    _completion("completion/x-request-id", max_tokens=4, headers={"X-Request-Id": "parity-completion"}, **GREEDY),
    # The Responses API (stateless: vllm serve stores no responses unless told to).
    _responses("responses/greedy", max_output_tokens=12, temperature=0),
    _responses(
        "responses/instructions-seeded",
        instructions="Answer in one word.",
        max_output_tokens=12,
        temperature=0.9,
        top_p=0.95,
        extra_body={"seed": 7},
    ),
    _responses(
        "responses/json_schema",
        max_output_tokens=32,
        temperature=0,
        text={"format": {"type": "json_schema", "name": "city", "schema": CITY_SCHEMA, "strict": True}},
    ),
    # The Anthropic Messages API (the anthropic SDK takes no sampling parameters of its own any more: vLLM's go in
    # extra_body).
    _messages("messages/greedy", max_tokens=12, extra_body={"temperature": 0}),
    _messages("messages/stop_sequences", max_tokens=32, stop_sequences=[" 100", "#never#"], extra_body=GREEDY),
]

_ERRORS = [
    _chat("error/unknown-model", 404, model="no-such-model", max_tokens=4),
    _completion("error/unknown-model-completion", 404, model="no-such-model", max_tokens=4),
    _chat("error/temperature", 400, temperature=-1, max_tokens=4),
    _chat("error/n0", 400, n=0, max_tokens=4),
    # vLLM refuses n > 1 with greedy sampling (the n answers would be the same).
    _chat("error/n2-greedy", 400, n=2, max_tokens=8, **GREEDY),
    _completion("error/n0-completion", 400, n=0, max_tokens=4),
    _chat("error/top_logprobs-without-logprobs", 400, top_logprobs=3, max_tokens=4),
    _completion("error/prompt-too-long", 400, prompt=LONG_PROMPT, max_tokens=4),
    _conversation("error/chat-too-long", [{"role": "user", "content": LONG_PROMPT}], 400, max_tokens=4),
    _conversation("error/chat-over-context", [{"role": "user", "content": OVER_CONTEXT_PROMPT}], 400, max_tokens=4),
    _completion("error/completion-over-context", 400, prompt=OVER_CONTEXT_PROMPT, max_tokens=4),
    _completion("error/max_tokens-over-context", 400, max_tokens=MAX_MODEL_LEN + 1),
    _conversation("error/content-not-text", [{"role": "user", "content": 5}], 400, max_tokens=4),
    _conversation("error/no-messages", [], 400, max_tokens=4),
    _conversation("error/message-without-role", [{"content": "hi"}], 400, max_tokens=4),
    _chat("error/named-tool-unknown", 400, tools=TOOLS, tool_choice=_named("nope"), max_tokens=4),
    # A JSON body sent as another media type (curl -d sends form-urlencoded): vLLM refuses all but application/json.
    _chat("error/content-type", 400, headers={"Content-Type": "text/plain"}, max_tokens=4),
    _completion("error/content-type-form", 400, headers={"Content-Type": "application/x-www-form-urlencoded"}),
]

# vllm serve's routes beyond the SDK's calls, and its answers to a path or method it does not have.
_HTTP = [
    _http("tokenize", "POST", "/tokenize", {"model": MODEL, "prompt": PROMPT}),
    _http("tokenize/chat", "POST", "/tokenize", {"model": MODEL, "messages": CHAT, "add_generation_prompt": True}),
    _http("detokenize", "POST", "/detokenize", {"model": MODEL, "tokens": [400, 401, 402, 403]}),
    _http("version", "GET", "/version"),
    _http("ping", "GET", "/ping"),
    _http("messages/count_tokens", "POST", "/v1/messages/count_tokens", {"model": MODEL, "messages": [USER]}),
    # A stored response names no model; vllm serve stores none by default.
    _http("error/responses-unknown-id", "GET", "/v1/responses/resp_nonexistent", expect_status=404),
    _http("error/responses-unknown-id-stream", "GET", "/v1/responses/resp_nonexistent?stream=true", expect_status=404),
    _http("error/responses-cancel-unknown-id", "POST", "/v1/responses/resp_nonexistent/cancel", expect_status=404),
    _http("error/tokenize-unknown-model", "POST", "/tokenize", {"model": "no-such-model", "prompt": "x"}, 404),
    _http("error/no-such-path", "GET", "/v1/no-such-path", expect_status=404),
    _http("error/wrong-method", "GET", "/v1/chat/completions", expect_status=405),
    _http("error/models-by-post", "POST", "/v1/models", {}, 405),
]

REQUESTS: list[Request] = [
    Request("models", "models"),
    *(r for request in _SUCCESSES for r in _both_ways(request)),
    *_ERRORS,
    # A prompt that leaves less room than max_tokens asks for: vLLM shortens the answer to what fits.
    _chat("chat/max_tokens-clamped", max_tokens=MAX_MODEL_LEN - 32, **GREEDY),
    # An invalid request asked for as a stream: the error comes as an HTTP status, before any chunk.
    _chat("error/temperature/stream", 400, temperature=-1, max_tokens=4, stream=True),
    _responses("error/responses-temperature", 400, temperature=-1, max_output_tokens=4),
    _messages("error/messages-unknown-model", 404, model="no-such-model", max_tokens=4),
    _messages("error/messages-temperature", 400, max_tokens=4, extra_body={"temperature": -1}),
    *_HTTP,
]


@dataclass
class Observation:
    """What a client saw of one request. ``choices`` are dicts with index, role, text, finish_reason, stop_reason,
    tool_calls (type, name, arguments), logprobs (token, bytes, logprob, top_logprobs per token; for completions
    also text_offset) in choice order; ``fields`` the dotted paths of the non-null fields the response (or any chunk
    of the stream) carried, list positions as ``[]``."""

    name: str
    endpoint: str
    stream: bool
    status: int
    error: Any = None
    model: str | None = None
    object: str | None = None
    choices: list[dict] = field(default_factory=list)
    usage: dict | None = None
    models: list[dict] | None = None
    fields: list[str] = field(default_factory=list)
    stream_info: dict | None = None
    # The answer's id (every chunk's, of a stream), kept only where the request named it with X-Request-Id.
    named_ids: list[str] | None = None
    # The Responses API's answer (of a stream, its completed response), and a stream's event types in order; an
    # "http" request's JSON answer and its Allow header.
    response: Any = None
    events: list[str] | None = None
    allow: str | None = None

    def texts(self) -> list[str]:
        return [c["text"] for c in self.choices]


# Keys whose values differ between any two servers (and two runs of one).
EXCLUDED_KEYS = frozenset({"id", "created", "created_at", "item_id", "system_fingerprint"})


def run_all(base_url: str, api_key: str | None = None, requests: Iterable[Request] | None = None) -> list[Observation]:
    """Send each request (REQUESTS by default) in order, one at a time, and record what came back."""
    import anthropic
    import openai

    # No retries: an error must be observed as the server first gave it.
    client = openai.OpenAI(base_url=base_url, api_key=api_key or "EMPTY", max_retries=0, timeout=300)
    # vllm serve's --api-key takes a Bearer token: the anthropic SDK's auth_token (its api_key goes as X-Api-Key).
    root = base_url.rstrip("/").removesuffix("/v1")
    messages = anthropic.Anthropic(base_url=root, auth_token=api_key or "EMPTY", max_retries=0, timeout=300)
    try:
        return [run_one(client, request, messages) for request in (REQUESTS if requests is None else requests)]
    finally:
        client.close()
        messages.close()


def _send_http(client, request: Request, obs: Observation) -> None:
    import urllib.error
    import urllib.request

    root = str(client.base_url).rstrip("/").removesuffix("/v1")
    headers = {"Authorization": f"Bearer {client.api_key}", **request.headers}
    data = None
    if request.body is not None:
        data = json.dumps(request.body).encode()
        headers.setdefault("Content-Type", "application/json")
    sent = urllib.request.Request(root + request.path, data=data, method=request.method, headers=headers)
    try:
        with urllib.request.urlopen(sent, timeout=300) as answer:
            status, allow, raw = answer.status, answer.headers.get("allow"), answer.read()
    except urllib.error.HTTPError as refused:
        status, allow, raw = refused.code, refused.headers.get("allow"), refused.read()
    obs.status, obs.allow = status, allow
    try:
        payload = _strip(json.loads(raw))
    except ValueError:
        payload = raw.decode("utf-8", "replace")
    if 200 <= status < 300:
        obs.response = payload
    else:  # as the SDK gives an error: its "error" object, where the body has one
        obs.error = payload.get("error", payload) if isinstance(payload, dict) else payload


# The events of a Messages stream that the server sends; the anthropic SDK adds its own (text, input_json, ...).
MESSAGES_SERVER_EVENTS = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    }
)


def _send_messages(client, request: Request, obs: Observation) -> None:
    body = {k: v for k, v in request.body.items() if k != "stream"}
    if request.stream:
        with client.messages.stream(**body) as stream:
            events = [event for event in stream if event.type in MESSAGES_SERVER_EVENTS]
            final = stream.get_final_message()
        # A run of one event type counts once, as for the Responses API.
        obs.events = [kind for kind, _ in itertools.groupby(event.type for event in events)]
        obs.fields = sorted(set().union(*(_paths(event.to_dict()) for event in events)))
    else:
        final = client.messages.create(**body)
        obs.fields = sorted(_paths(final.to_dict()))
    obs.response = _strip(final.to_dict())


def run_one(client, request: Request, messages=None) -> Observation:
    """``client``: an openai.OpenAI; ``messages``: an anthropic.Anthropic, for "messages" requests."""
    import anthropic
    import openai

    obs = Observation(request.name, request.endpoint, request.stream, status=200)
    try:
        if request.endpoint == "http":
            _send_http(client, request, obs)
            return obs
        if request.endpoint == "messages":
            _send_messages(messages, request, obs)
            return obs
        if request.endpoint == "responses":
            result = client.responses.create(**request.body, extra_headers=request.headers or None)
            if request.stream:
                events = list(result)
                # How many deltas a text comes in depends on timing (vLLM joins the outputs a slow reader has not
                # taken), so a run of one event type counts once.
                obs.events = [kind for kind, _ in itertools.groupby(event.type for event in events)]
                completed = [e.response.to_dict() for e in events if e.type == "response.completed"]
                obs.response = _strip(completed[0]) if completed else None
                obs.fields = sorted(set().union(*(_paths(e.to_dict()) for e in events)))
            else:
                obs.response = _strip(result.to_dict())
                obs.fields = sorted(_paths(result.to_dict()))
            return obs
        if request.endpoint == "models":
            page = client.models.list()
            obs.object = page.object
            obs.models = [_strip(m.to_dict()) for m in page.data]
            obs.fields = sorted(_paths({"object": page.object, "data": [m.to_dict() for m in page.data]}))
            return obs
        create = client.chat.completions.create if request.endpoint == "chat" else client.completions.create
        result = create(**request.body, extra_headers=request.headers or None)
        if request.stream:
            ids = _reassemble(obs, result)
        else:
            ids = {result.id}
            _record(obs, result.to_dict())
        if any(name.lower() == "x-request-id" for name in request.headers):
            obs.named_ids = sorted(ids)
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        obs.status = exc.status_code
        obs.error = _strip(exc.body) if exc.body is not None else exc.response.text
    return obs


def _record(obs: Observation, body: dict) -> None:
    obs.model, obs.object, obs.usage = body.get("model"), body.get("object"), body.get("usage")
    obs.fields = sorted(_paths(body))
    for choice in body.get("choices", []):
        if obs.endpoint == "chat":
            message = choice.get("message") or {}
            role, text, calls = message.get("role"), message.get("content"), message.get("tool_calls") or []
            logprobs = (choice.get("logprobs") or {}).get("content")
        else:
            role, text, calls = None, choice.get("text"), []
            logprobs = choice.get("logprobs")
        obs.choices.append(
            {
                "index": choice.get("index"),
                "role": role,
                "text": text,
                "finish_reason": choice.get("finish_reason"),
                "stop_reason": choice.get("stop_reason"),
                "tool_calls": [_tool_call(c) for c in calls],
                "logprobs": logprobs,
            }
        )
    obs.choices.sort(key=lambda c: c["index"])


def _tool_call(call: dict) -> dict:
    function = call.get("function") or {}
    return {"type": call.get("type"), "name": function.get("name"), "arguments": function.get("arguments")}


def _reassemble(obs: Observation, stream) -> set[str]:
    """Concatenate the deltas of each choice; tool calls are merged by their index, as clients do. Returns the ids the
    chunks carried."""
    choices: dict[int, dict] = {}
    calls: dict[int, dict[int, dict]] = {}
    paths: set[str] = set()
    chunks = usage_chunks = 0
    last_has_choices = None
    ids: set[str] = set()
    for chunk in stream:
        body = chunk.to_dict()
        ids.add(body.get("id"))
        chunks += 1
        paths |= _paths(body)
        obs.model, obs.object = body.get("model"), body.get("object")
        if body.get("usage") is not None:
            usage_chunks += 1
            obs.usage = body["usage"]
        last_has_choices = bool(body.get("choices"))
        for choice in body.get("choices", []):
            index = choice.get("index")
            acc = choices.setdefault(
                index,
                {
                    "index": index,
                    "role": None,
                    "text": None,
                    "finish_reason": None,
                    "stop_reason": None,
                    "tool_calls": [],
                    "logprobs": None,
                },
            )
            if obs.endpoint == "chat":
                delta = choice.get("delta") or {}
                acc["role"] = acc["role"] or delta.get("role")
                piece = delta.get("content")
                for call in delta.get("tool_calls") or []:
                    merged = calls.setdefault(index, {}).setdefault(
                        call.get("index", 0), {"type": None, "name": None, "arguments": None}
                    )
                    function = call.get("function") or {}
                    merged["type"] = merged["type"] or call.get("type")
                    if function.get("name"):
                        merged["name"] = (merged["name"] or "") + function["name"]
                    if function.get("arguments") is not None:
                        merged["arguments"] = (merged["arguments"] or "") + function["arguments"]
                lp = (choice.get("logprobs") or {}).get("content")
                if lp is not None:
                    acc["logprobs"] = (acc["logprobs"] or []) + lp
            else:
                piece = choice.get("text")
                lp = choice.get("logprobs")
                if lp is not None:
                    merged = acc["logprobs"] or {}
                    for key, values in lp.items():
                        merged[key] = (merged.get(key) or []) + (values or [])
                    acc["logprobs"] = merged
            if piece is not None:
                acc["text"] = (acc["text"] or "") + piece
            if choice.get("finish_reason") is not None:
                acc["finish_reason"] = choice["finish_reason"]
            if choice.get("stop_reason") is not None:
                acc["stop_reason"] = choice["stop_reason"]
    for index, by_call in calls.items():
        choices[index]["tool_calls"] = [by_call[i] for i in sorted(by_call)]
    obs.choices = [choices[i] for i in sorted(choices)]
    obs.fields = sorted(paths)
    obs.stream_info = {"usage_chunks": usage_chunks, "last_chunk_has_choices": last_has_choices, "chunks": chunks > 0}
    return ids


def _strip(value: Any) -> Any:
    """``value`` without the keys that never match between servers."""
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in EXCLUDED_KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _paths(value: Any, prefix: str = "") -> set[str]:
    out: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            if item is not None:
                path = f"{prefix}.{key}" if prefix else key
                out.add(path)
                out |= _paths(item, path)
    elif isinstance(value, list):
        for item in value:
            out |= _paths(item, f"{prefix}[]")
    return out


def compare(a: Sequence[Observation], b: Sequence[Observation]) -> list[str]:
    """Where two runs differ, one line each: ``NAME: PATH: A != B`` (requests matched by name)."""
    by_name = {o.name: o for o in b}
    differences: list[str] = []
    for obs in a:
        other = by_name.pop(obs.name, None)
        if other is None:
            differences.append(f"{obs.name}: only in the first run")
            continue
        found = _diff(_strip(dataclasses.asdict(obs)), _strip(dataclasses.asdict(other)))
        differences += [f"{obs.name}: {d}" for d in found]
    differences += [f"{name}: only in the second run" for name in by_name]
    return differences


def _diff(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                out.append(f"{sub}: {_show(a.get(key, '<absent>'))} != {_show(b.get(key, '<absent>'))}")
            else:
                out += _diff(a[key], b[key], sub)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in _diff(x, y, f"{path}[{i}]")]
    # Exact: a float that differs in its last bit is a difference (bool is not int here: True != 1).
    if type(a) is not type(b) or a != b:
        return [f"{path}: {_show(a)} != {_show(b)}"]
    return []


def _show(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "..."
