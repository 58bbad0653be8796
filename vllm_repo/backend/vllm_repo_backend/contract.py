"""The vLLM backend's request/response contract: its tensors, config.pbtxt parameters, files, OpenAI routes and the
frames of a gateway's stream socket.

It is the seed backend's contract (triton-inference-server/vllm_backend), kept unchanged so existing clients work, plus
one optional input and two outputs for OpenAI API requests (an OpenAI gateway forwards each HTTP request as one Triton
request, and vLLM's own OpenAI serving layer answers it inside the backend).

This is the one source: the backend's model.py reads it from the copy installed beside it, and the rest of vllm-repo
(validate's rules, init, the OpenAI gateway, launch) imports it as ``vllm_repo.backend.vllm_repo_backend.contract``.
So it imports only the standard library: no Triton, no vLLM, no numpy.
"""

from __future__ import annotations

from typing import NamedTuple


class Tensor(NamedTuple):
    name: str
    data_type: str  # Triton's enum name, e.g. "TYPE_STRING"
    dims: tuple[int, ...]
    optional: bool = False


# The OpenAI request's tensors, named on their own for the gateway that fills and reads them.
OPENAI_REQUEST_INPUT = "openai_request"
OPENAI_STATUS_OUTPUT = "openai_status"
OPENAI_RESPONSE_OUTPUT = "openai_response"

INPUTS: tuple[Tensor, ...] = (
    Tensor("text_input", "TYPE_STRING", (1,)),
    Tensor("image", "TYPE_STRING", (-1,), optional=True),
    Tensor("stream", "TYPE_BOOL", (1,), optional=True),
    Tensor("sampling_parameters", "TYPE_STRING", (1,), optional=True),
    Tensor("exclude_input_in_output", "TYPE_BOOL", (1,), optional=True),
    Tensor("return_finish_reason", "TYPE_BOOL", (1,), optional=True),
    Tensor("return_cumulative_logprob", "TYPE_BOOL", (1,), optional=True),
    Tensor("return_logprobs", "TYPE_BOOL", (1,), optional=True),
    Tensor("return_num_input_tokens", "TYPE_BOOL", (1,), optional=True),
    Tensor("return_num_output_tokens", "TYPE_BOOL", (1,), optional=True),
    # UTF-8 JSON {"endpoint": one of OPENAI_ENDPOINTS or OPENAI_ID_ENDPOINTS' "/v1/responses/ID" (a query string after
    # "?" allowed), "body": {...}, optionally "stream_to": {"socket": PATH, "id": N} and "headers": [[NAME, VALUE],
    # ...]}; when present the request is an OpenAI request and every other input is ignored (text_input is still
    # sent, as ""). With stream_to, a streamed 200 response's bytes go to the Unix socket PATH as frames of stream N
    # (below) instead of in Triton responses, if the backend can reach it; a CANCEL frame for stream N there cancels
    # the request, whatever its answer. headers are the client's, for vLLM's app; without them it gets Content-Type
    # JSON.
    Tensor(OPENAI_REQUEST_INPUT, "TYPE_STRING", (1,), optional=True),
)

OUTPUTS: tuple[Tensor, ...] = (
    Tensor("text_output", "TYPE_STRING", (-1,)),
    Tensor("finish_reason", "TYPE_STRING", (-1,)),
    Tensor("cumulative_logprob", "TYPE_FP32", (-1,)),
    Tensor("logprobs", "TYPE_STRING", (-1,)),
    Tensor("num_input_tokens", "TYPE_UINT32", (1,)),
    Tensor("num_output_tokens", "TYPE_UINT32", (-1,)),
    # OpenAI requests only: the HTTP status (on every response) and bytes to write to the HTTP body as they are.
    Tensor(OPENAI_STATUS_OUTPUT, "TYPE_INT32", (1,)),
    Tensor(OPENAI_RESPONSE_OUTPUT, "TYPE_STRING", (1,)),
)

INPUTS_BY_NAME = {t.name: t for t in INPUTS}
OUTPUTS_BY_NAME = {t.name: t for t in OUTPUTS}

# The boolean inputs that ask for an output beside text_output.
ADDITIONAL_OUTPUT_FLAGS = (
    "return_finish_reason",
    "return_cumulative_logprob",
    "return_logprobs",
    "return_num_input_tokens",
    "return_num_output_tokens",
)

# config.pbtxt `parameters` the backend reads. Values are strings in config.pbtxt; booleans are "true"/"false".
# STREAM_ONE_RESPONSE_PER_TOKEN: a stream's tokens one response each, never merged (for clients that count responses).
# ENGINE_PROCESS: vLLM's AsyncLLM in a process of its own, the stub relaying (engine_link.py).
# REPORT_HISTOGRAMS_PER_VALUE: vLLM's histograms as Triton histogram metrics, one round trip a value (metrics_report).
BOOLEAN_PARAMETERS: tuple[str, ...] = (
    "REPORT_CUSTOM_METRICS",
    "REPORT_HISTOGRAMS_PER_VALUE",
    "ENABLE_VLLM_HEALTH_CHECK",
    "STREAM_ONE_RESPONSE_PER_TOKEN",
    "ENGINE_PROCESS",
)
INTEGER_PARAMETERS: tuple[str, ...] = ("DEFAULT_MAX_TOKENS",)
# KIND_MODEL only: GPUs for the instance, "0,1", or "0,1;2,3" with one group per instance.
STRING_PARAMETERS: tuple[str, ...] = ("GPU_DEVICE_IDS",)
KNOWN_PARAMETERS: tuple[str, ...] = BOOLEAN_PARAMETERS + INTEGER_PARAMETERS + STRING_PARAMETERS

# How a boolean may be written, in config.pbtxt, a request's tensors or its JSON (anything else is an error).
TRUE_STRINGS = frozenset({"true", "1", "yes", "on"})
FALSE_STRINGS = frozenset({"false", "0", "no", "off"})

# The files the backend reads in a model's version directory.
ENGINE_ARGS_FILE = "model.json"  # vLLM's engine arguments
LORA_FILE = "multi_lora.json"  # {adapter name: path}, with "enable_lora": true
OPENAI_FILE = "openai.json"  # vllm serve's frontend options for the model's OpenAI API

# In the server's environment, "1" (or "true"): build vLLM's OpenAI layer while the model loads even without an
# openai.json, so that a gateway in front of the server answers its first request at once (launch --openai-port sets
# it). Without it, and without openai.json, the layer is built on the first OpenAI request.
OPENAI_AT_LOAD_ENV = "VLLM_REPO_OPENAI_AT_LOAD"

# The vLLM releases the backend drives: the oldest with the APIs it uses (AsyncLLM v1, StructuredOutputsParams,
# RequestOutputKind.DELTA merging), and the newest it was tested with (newer ones load with a warning, since vLLM's
# internals drift between releases).
MIN_VLLM = (0, 20, 0)
NEWEST_TESTED_VLLM = (0, 32, 0)

# The POST routes of vllm serve whose JSON body names the model: an OpenAI gateway sends each to that model's backend.
# /v1/messages is the Anthropic Messages API, which vllm serve serves beside OpenAI's.
OPENAI_MODEL_ENDPOINTS: tuple[str, ...] = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/tokenize",
    "/detokenize",
)
# Every route an OpenAI request may name, with the HTTP method vLLM's router serves it with. /health is the backend's
# own, as vllm serve answers it: 200 while the engine lives, 503 once it is dead.
OPENAI_ENDPOINTS: dict[str, str] = {
    **dict.fromkeys(OPENAI_MODEL_ENDPOINTS, "POST"),
    "/v1/models": "GET",
    "/health": "GET",
    "/version": "GET",
}
# Routes whose path names a stored response (vllm serve keeps them with VLLM_ENABLE_RESPONSES_API_STORE=1).
OPENAI_ID_ENDPOINTS: dict[str, str] = {"/v1/responses/{id}": "GET", "/v1/responses/{id}/cancel": "POST"}

# A frame on a gateway's stream socket (vllm_repo.serve.openai.stream_socket): struct format of the header (stream id,
# kind, payload length), then the payload. From the backend, START (no payload): vLLM has begun a streamed 200 answer,
# its headers may go to the client; DATA: bytes of the response body, in order; END: the body is complete. From the
# gateway, CANCEL (no payload): the stream's client went away, abort its request.
STREAM_FRAME_HEADER = "<QBI"
STREAM_FRAME_DATA = 0
STREAM_FRAME_END = 1
STREAM_FRAME_CANCEL = 2
STREAM_FRAME_START = 3
# What the gateway writes first on each connection; a backend writes only to a socket that says it (not to any path a
# request names).
STREAM_SOCKET_HELLO = b"vllm-repo stream socket 1\n"

# openai.json keys (vllm serve options) the backend sets itself, and refuses to load a model over, with why. api_key:
# the gateway is the HTTP server and authenticates; it keeps the Authorization header to itself.
OPENAI_OPTIONS_SET_BY_BACKEND: dict[str, str] = {
    "model_tag": "the model is model.json's",
    "served_model_name": "the served model name is the Triton model's name",
    "lora_modules": "the LoRA adapters are those of multi_lora.json",
    "api_key": "the OpenAI gateway checks API keys: give --api-key to `vllm-repo launch --openai-port` or "
    "`vllm-repo openai`",
}

# openai.json holds vllm serve's frontend options, checked by vllm serve's own parser (make_arg_parser). Where the
# parser lives, newest first: vLLM 0.29 moved it from entrypoints.openai to entrypoints.launchers, 0.33 to
# entrypoints.common (vllm_repo.schema.serve_options reads each release's options through the same list).
SERVE_PARSER_MODULES: tuple[str, ...] = (
    "vllm.entrypoints.common.cli_args",
    "vllm.entrypoints.launchers.cli_args",
    "vllm.entrypoints.openai.cli_args",
)
# The parser's entries that are not serving options (argparse's own --help, vllm serve's --config YAML file).
SERVE_PARSER_NOT_OPTIONS = frozenset({"help", "config"})

# vLLM settings on the backend's response path: what the backend does with each, and why. None of them is forced on
# the user's engine; the backend adapts to them instead (bench/results/backend.md has the measurements).
VLLM_SETTINGS_ON_RESPONSE_PATH: dict[str, str] = {
    "output_kind": "set per request: DELTA for a stream, so that vLLM merges the tokens a stream has not read yet "
    "into one output, FINAL_ONLY for a complete answer",
    "VLLM_V1_OUTPUT_PROC_CHUNK_SIZE": "read, never set: vLLM's output handler yields to the loop between chunks of "
    "this many outputs of one engine step (128 by default). Up to that many requests in flight the engine loop sends "
    "each response itself; above it the send threads do, and a stream reads its next output only once its last "
    "response is sent, so responses per request fall as the load rises whatever the chunk size (raising the chunk "
    "size only moved the one-response-per-token cliff from 256 to 512 streams)",
    "disable_log_stats": "true unless model.json says otherwise: vLLM's periodic stats log and in-process "
    "registry are unreachable through Triton; REPORT_CUSTOM_METRICS reports its metrics instead",
    "stat_loggers": "the backend's own (with REPORT_CUSTOM_METRICS), plus a Prometheus logger that records nothing: "
    "vLLM would add its own, which cost the engine loop a histogram update per token for a registry nobody scrapes",
}

# The log lines that say why a vLLM engine died, as vLLM and torch write them; the backend names the cause when its
# engine dies, and `vllm-repo doctor` reads the same lines back. A process of vLLM's that died: the multiproc
# executor's worker monitor ("Worker proc VllmWorker-0 died unexpectedly (exit code: -4)") or the engine client's
# monitor of the engine core process.
PROCESS_DIED_PATTERN = (
    r"(?P<who>[\w -]*?(?:proc|process) [\w-]+) died unexpectedly(?:.*?exit code:? (?P<code>-?\d+))?"
    r"|(?P<client>engine core) exited unexpectedly"
)
# torch's out-of-memory error on a GPU, with the figures it gives when it gives them.
CUDA_OOM_PATTERN = (
    r"(?:torch\.)?(?:cuda\.)?OutOfMemoryError: CUDA out of memory\. Tried to allocate (?P<want>[\d.]+ [KMG]iB)\."
    r"(?: GPU (?P<gpu>\d+) has a total capacity of (?P<total>[\d.]+ [KMG]iB)"
    r" of which (?P<free>[\d.]+ [KMG]iB) is free)?"
    r"|CUDA out of memory"
)
