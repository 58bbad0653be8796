"""Triton's native requests: the inputs read, the sampling parameters checked and converted into vLLM's
SamplingParams, and the output tensors of each response assembled from vLLM's outputs.

A bad request is a RequestError naming the field (``sampling_parameters.top_p``), never a TypeError from inside vLLM.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from .contract import ADDITIONAL_OUTPUT_FLAGS, FALSE_STRINGS, TRUE_STRINGS
from .errors import RequestError, did_you_mean

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
    # The outputs the client asked for (None: it named none, so every one). Only these are built: the stub prunes
    # the others in ResponseSender.send after releasing the GIL, and freeing a numpy array there crashes the stub
    # (python_backend's response_sender.cc; seen on the H200 under load, a client asking for the token counts only).
    requested: frozenset[str] | None = None


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

    requested = options.requested

    def wanted(name: str, switched_on: bool = True) -> bool:
        # An output the client did not name is never built: each costs the stub's GIL on every response.
        return switched_on and (requested is None or name in requested)

    tensors: list[tuple[str, np.ndarray]] = []
    if wanted("text_output"):
        prefix = (request_output.prompt or "") if (options.prepend_prompt and first) else ""
        texts = [(prefix + (c.text if c is not None else "")).encode("utf-8") for c in by_index]
        tensors.append(("text_output", np.array(texts, dtype=np.object_)))
    if wanted("finish_reason", options.return_finish_reason):
        reasons = [str(c.finish_reason).encode() if c is not None else b"None" for c in by_index]
        tensors.append(("finish_reason", np.array(reasons, dtype=np.object_)))
    if wanted("cumulative_logprob", options.return_cumulative_logprob):
        values = [
            c.cumulative_logprob if c is not None and c.cumulative_logprob is not None else float("nan")
            for c in by_index
        ]
        tensors.append(("cumulative_logprob", np.array(values, dtype=np.float32)))
    if wanted("logprobs", options.return_logprobs):
        rows = [_logprobs_json(c.logprobs) if c is not None else b"[]" for c in by_index]
        tensors.append(("logprobs", np.array(rows, dtype=np.object_)))
    if wanted("num_input_tokens", options.return_num_input_tokens):
        tensors.append(("num_input_tokens", np.array([len(request_output.prompt_token_ids or ())], dtype=np.uint32)))
    if wanted("num_output_tokens", options.return_num_output_tokens):
        counts = [len(c.token_ids) if c is not None else 0 for c in by_index]
        tensors.append(("num_output_tokens", np.array(counts, dtype=np.uint32)))
    return tensors


def sampling_param_keys(sampling_params_class: type) -> list[str]:
    """The fields of vLLM's SamplingParams (a msgspec Struct in recent releases, a dataclass or a plain class before),
    which are the sampling keys a request may give."""
    names = getattr(sampling_params_class, "__struct_fields__", None)
    if names is None:
        names = (
            [f.name for f in dataclasses.fields(sampling_params_class)]
            if dataclasses.is_dataclass(sampling_params_class)
            else list(getattr(sampling_params_class, "__annotations__", {}))
        )
    return [n for n in names if not n.startswith("_")]


def first_element(array: np.ndarray | None) -> Any:
    """A tensor's first element (a BYTES tensor's bytes), or None for an absent or empty tensor."""
    if array is None:
        return None
    flat = array.reshape(-1)
    return flat[0] if flat.size else None


def decode_images(images: np.ndarray) -> list[Any]:
    """The ``image`` input's base64-encoded images, as the RGB PIL images vLLM's multi-modal input takes."""
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


class NativeRequest(NamedTuple):
    """A native request, read and checked: what vLLM's generate() takes, and what its responses are to carry. Only
    vLLM's own types and plain data: vLLM pickles the request on its way to the engine core and its workers."""

    prompt: dict[str, Any]
    sampling_params: Any  # vLLM's SamplingParams
    lora_request: Any  # vLLM's LoRARequest, or None
    options: OutputOptions


class NativeRequestReader:
    """Reads native requests for one model: vLLM's classes (environment.VllmApi), the keys its SamplingParams and
    StructuredOutputsParams take, the model's LoRA adapters and its DEFAULT_MAX_TOKENS, all fixed at load."""

    def __init__(self, vllm: Any, lora_adapters: Mapping[str, str] | None, default_max_tokens: int | None) -> None:
        self.vllm = vllm
        self.lora_adapters = lora_adapters
        self.default_max_tokens = default_max_tokens
        self.sampling_keys = sampling_param_keys(vllm.SamplingParams)
        self.structured_keys = [f.name for f in dataclasses.fields(vllm.StructuredOutputsParams)]

    def read(
        self,
        tensor: Callable[[str], np.ndarray | None],
        parameters: str | Mapping | None,
        requested_outputs: Sequence[str] = (),
    ) -> NativeRequest:
        """The request whose input tensors ``tensor(name)`` gives (None for an absent one), with its Triton request
        parameters (JSON) and the outputs its client asked for (none named: all of them). Raises RequestError naming
        the field at fault."""
        text = first_element(tensor("text_input"))
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
        stream_value = first_element(tensor("stream"))
        stream = parse_bool(stream_value, "stream") if stream_value is not None else False
        exclude_value = first_element(tensor("exclude_input_in_output"))
        # Streams carry only new text by default; complete responses include the prompt by default.
        exclude = parse_bool(exclude_value, "exclude_input_in_output") if exclude_value is not None else stream
        flags = {}
        for name in ADDITIONAL_OUTPUT_FLAGS:
            value = first_element(tensor(name))
            flags[name] = parse_bool(value, name) if value is not None else False

        spec = parse_sampling_parameters(
            first_element(tensor("sampling_parameters")), parameters, self.sampling_keys, self.default_max_tokens
        )
        lora = resolve_lora(spec.lora_name, self.lora_adapters)
        lora_request = self.vllm.LoRARequest(*lora) if lora else None

        kwargs = dict(spec.kwargs)
        if spec.structured is not None:
            check_structured_keys(spec.structured, self.structured_keys)
            structured = dict(spec.structured)
            structured.pop("backend", None)
            try:
                kwargs["structured_outputs"] = self.vllm.StructuredOutputsParams(**structured)
            except (TypeError, ValueError) as exc:
                raise RequestError("sampling_parameters.structured_outputs", str(exc)) from None
        kwargs["output_kind"] = self.vllm.DELTA if stream else self.vllm.FINAL_ONLY
        try:
            sampling_params = self.vllm.SamplingParams(**kwargs)
        except Exception as exc:  # vLLM's validation errors are not ValueErrors in every release
            raise RequestError(validation_field(exc), str(exc)) from None

        prompt: dict[str, Any] = {"prompt": text}
        images = tensor("image")
        if images is not None and images.size:
            prompt["multi_modal_data"] = {"image": decode_images(images)}
        requested = frozenset(requested_outputs) if requested_outputs else None
        options = OutputOptions(stream, not exclude, sampling_params.n, **flags, requested=requested)
        return NativeRequest(prompt, sampling_params, lora_request, options)
