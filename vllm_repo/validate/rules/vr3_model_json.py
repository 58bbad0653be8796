"""VR3xx: model.json, every key checked against vLLM's EngineArgs of the chosen release."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any

from vllm_repo import hf
from vllm_repo.diagnostics.diagnostic import Severity
from vllm_repo.repository import ModelDirectory
from vllm_repo.repository.documents import JsonDocument
from vllm_repo.schema.history import explain_missing_key, replacement_for
from vllm_repo.schema.loader import EngineArgsSchema, accepts, json_type
from vllm_repo.validate.rules.common import (
    did_you_mean,
    engine_args_objects,
    fixes,
    inverts_switch,
    not_one_json_object,
    path_exists,
    vllm_engine_args,
)
from vllm_repo.validate.rules.registry import CheckContext, Finding, rule

# Keys people put in model.json that are per-request sampling settings, not engine arguments.
SAMPLING_KEYS = {
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "max_new_tokens",
    "min_tokens",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "do_sample",
    "no_repeat_ngram_size",
    "stop",
    "n",
    "best_of",
    "ignore_eos",
    "logprobs",
    "length_penalty",
    "num_beams",
}
# Spellings that difflib can't connect to the real choice.
CHOICE_ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp32": "float32",
    "f16": "float16",
    "f32": "float32",
    "float8": "fp8",
    "int8": "fp8",
}
# (lower, lower_inclusive, upper, upper_inclusive, special values allowed)
RANGES: dict[str, tuple[float | None, bool, float | None, bool, tuple]] = {
    "gpu_memory_utilization": (0.0, False, 1.0, True, ()),
    "tensor_parallel_size": (1, True, None, False, ()),
    "pipeline_parallel_size": (1, True, None, False, ()),
    "data_parallel_size": (1, True, None, False, ()),
    "max_model_len": (1, True, None, False, (-1,)),  # -1: fit the longest length the KV cache allows
    "max_num_seqs": (1, True, None, False, ()),
    "max_num_batched_tokens": (1, True, None, False, ()),
    "block_size": (1, True, None, False, ()),
    "swap_space": (0, True, None, False, ()),
    "cpu_offload_gb": (0, True, None, False, ()),
    "kv_cache_memory_bytes": (1, True, None, False, ()),
    "num_gpu_blocks_override": (1, True, None, False, ()),
    "max_loras": (1, True, None, False, ()),
    "max_lora_rank": (1, True, None, False, ()),
    "max_cpu_loras": (1, True, None, False, ()),
    "max_logprobs": (-1, True, None, False, ()),
}
_SIZE_SUFFIX = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG])\s*$")


@rule("VR301", "engine-args-syntax", Severity.ERROR)
def engine_args_syntax(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """model.json is not valid JSON, or not a JSON object.

    The backend parses model.json with Python's json module and fails to load the model when the file is not valid
    JSON (no comments, no trailing commas) or holds something other than a JSON object.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {
          "model": "Qwen/Qwen2.5-0.5B-Instruct",
          "gpu_memory_utilization": 0.5,
        }
    """
    for _, doc in vllm_engine_args(model):
        yield from not_one_json_object(
            doc,
            "model.json must be one JSON object of vLLM engine arguments",
            'write {"model": "<HF id or path>", ...}',
        )


@rule("VR302", "unknown-engine-arg", Severity.ERROR)
def unknown_engine_arg(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """A model.json key that the chosen vLLM release's EngineArgs does not have (vLLM raises a TypeError at load).

    The backend passes every key of model.json to vLLM's AsyncEngineArgs, so a single key the release does not have
    stops the model from loading. Sampling settings such as temperature are not engine arguments: clients send them
    with each request, in sampling_parameters. The known keys depend on the release (--vllm-version).

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct", "temperature": 0.7}
    """
    schema = ctx.schema
    for doc in engine_args_objects(model):
        for key in doc.data:
            if schema.get(key) is not None:
                continue
            history = explain_missing_key(key, schema.vllm_version)
            migration_hint, fix = _migration(doc, key, schema)
            near = did_you_mean(key, schema.fields, cutoff=0.8)
            if key in SAMPLING_KEYS:
                hint = (
                    f"'{key}' is a sampling setting: send it per request in sampling_parameters (or set the "
                    "backend's DEFAULT_MAX_TOKENS parameter for max_tokens)"
                )
            elif migration_hint:
                hint = migration_hint
            elif near and not inverts_switch(key, near):
                hint = f"did you mean '{near}'?"
            else:
                hint = "remove it; `vllm-repo schema show` lists the release's engine arguments"
            message = f"'{key}' is not an engine argument of vLLM {schema.vllm_version}"
            if history:
                message += f": {history}"
            yield Finding(doc.path, message, doc.position_of(key), hint, fix=fix)


def _migration(doc: JsonDocument, key: str, schema: EngineArgsSchema) -> tuple[str | None, Any]:
    """What replaced a key vLLM removed, as a hint, and the fix where the chosen release leaves one right answer: a
    plain rename, or the value the replacement's table gives for this one (``upgrade`` reads the same table)."""
    replacement = replacement_for(key)
    if replacement is None or schema.get(replacement.new) is None:
        return None, None
    new = replacement.new
    if replacement.plain:
        return f"rename it to '{new}'", fixes().rename_json_key(doc, key, new, f"rename to {new}")
    value = doc.data.get(key)
    listed, carried = replacement.carried(value)
    if replacement.values is None or not listed:
        return f"use '{new}' ({replacement.how})", None
    if carried is None:  # the old value was the default: nothing to write
        edits = fixes().remove_json_keys(doc, [key])
        return f"remove it: {json.dumps(value)} was the default, and '{new}' needs nothing", fixes().Fix(
            f"remove {key}", edits
        )
    written = f'"{new}": {json.dumps(carried)}'
    hint = f"write {written} instead ({replacement.how})"
    if new in doc.data:
        return f"{hint}; the file sets '{new}' already: keep one", None
    spans = doc.key_spans[key]
    edits = (
        fixes().TextEdit(doc.path, spans[0], json.dumps(new)),
        fixes().TextEdit(doc.path, spans[1], json.dumps(carried)),
    )
    return hint, fixes().Fix(f"write {written}", edits)


def _coerced(value: Any, types: list[str]) -> Any:
    """The JSON value a quoted true/false or number stands for, where the field takes it; None otherwise (a size
    such as "8k" has more than one reading)."""
    if not isinstance(value, str):
        return None
    text = value.strip()
    if "boolean" in types and text in ("true", "false"):
        return text == "true"
    try:
        number = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if isinstance(number, (int, float)) and not isinstance(number, bool) and accepts(types, number):
        return number if math.isfinite(number) else None
    return None


def _same_but_case(value: Any, choices: list[Any]) -> Any:
    same = [c for c in choices if isinstance(c, str) and isinstance(value, str) and c.lower() == value.lower()]
    return same[0] if len(same) == 1 else None


def _coercion_hint(value: Any, types: list[str]) -> str | None:
    if isinstance(value, str):
        text = value.strip()
        if "boolean" in types and text.lower() in ("true", "false"):
            return f"write {text.lower()} without quotes"
        if "integer" in types or "number" in types:
            size = _SIZE_SUFFIX.match(text)
            if size:
                factor = {"k": 1024, "m": 1024**2, "g": 1024**3}[size.group(2).lower()]
                number = float(size.group(1)) * factor
                return f"write the number itself, e.g. {int(number)}" if math.isfinite(number) else None
            try:
                number = json.loads(text)
            except (ValueError, RecursionError):
                return None
            if isinstance(number, (int, float)) and not isinstance(number, bool):
                return f"write {text} without quotes"
        if "object" in types or "array" in types:
            try:
                parsed = json.loads(text)
            except (ValueError, RecursionError):
                return None
            if isinstance(parsed, (dict, list)):
                return "write the JSON value itself, not a string holding it"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and "boolean" in types and value in (0, 1):
        return f"write {'true' if value else 'false'}"
    if isinstance(value, float) and value.is_integer() and "integer" in types:
        return f"write {int(value)}"
    return None


@rule("VR303", "engine-arg-type", Severity.ERROR)
def engine_arg_type(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """A model.json value of the wrong JSON type ("true" for a boolean, "8k" for an integer).

    model.json values reach vLLM as the JSON types they are written in: "8k" or "8192" is a string, not the integer
    max_model_len takes, and "true" in quotes is a string, not a boolean. The hint shows the value to write instead.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct", "max_model_len": "8k"}
    """
    for doc in engine_args_objects(model):
        for key, value in doc.data.items():
            field = ctx.schema.get(key)
            if field is None or accepts(field.types, value):
                continue
            expected = " or ".join(t for t in field.types if t != "null") or "null"
            if "null" in field.types:
                expected += " (or null)"
            coerced = _coerced(value, field.types)
            yield Finding(
                doc.path,
                f"'{key}' must be {expected}, not {json_type(value)} {json.dumps(value)}",
                doc.position_of(key),
                _coercion_hint(value, field.types),
                fix=None
                if coerced is None
                else fixes().replace_json_value(doc, key, coerced, f"write {json.dumps(coerced)} without quotes"),
            )


@rule("VR304", "engine-arg-choice", Severity.ERROR)
def engine_arg_choice(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """A model.json value outside the argument's choices (dtype "bf16").

    Arguments such as dtype and kv_cache_dtype take one of the names the release lists, and vLLM refuses to start
    with any other spelling. The hint maps common abbreviations (bf16, fp16) to the accepted name.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct", "dtype": "bf16"}
    """
    for doc in engine_args_objects(model):
        for key, value in doc.data.items():
            field = ctx.schema.get(key)
            if field is None or not field.choices or value is None or not accepts(field.types, value):
                continue
            if value in field.choices or isinstance(value, (dict, list)):
                continue
            alias = CHOICE_ALIASES.get(str(value).lower())
            near = alias if alias in field.choices else did_you_mean(str(value), field.choices, cutoff=0.6)
            choices = ", ".join(json.dumps(c) for c in field.choices)
            # One right answer: a known abbreviation (bf16) or the same name in other letter case (BFloat16).
            certain = alias if alias in field.choices else _same_but_case(value, field.choices)
            yield Finding(
                doc.path,
                f"'{key}' is {json.dumps(value)}; vLLM {ctx.schema.vllm_version} accepts {choices}",
                doc.position_of(key),
                f"did you mean {json.dumps(near)}?" if near else None,
                fix=fixes().replace_json_value(doc, key, certain, f"write {json.dumps(certain)}")
                if certain is not None
                else None,
            )


@rule("VR305", "engine-arg-range", Severity.ERROR)
def engine_arg_range(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """A numeric model.json value outside the range vLLM accepts (gpu_memory_utilization in (0, 1]).

    gpu_memory_utilization is the fraction of each GPU's memory vLLM may use, so a percentage such as 90 is out of
    range. Sizes and counts such as tensor_parallel_size, max_num_seqs or block_size must be at least 1.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct", "gpu_memory_utilization": 90}
    """
    for doc in engine_args_objects(model):
        for key, (low, low_incl, high, high_incl, special) in RANGES.items():
            value = doc.data.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value in special:
                continue
            too_low = low is not None and (value < low or (value == low and not low_incl))
            too_high = high is not None and (value > high or (value == high and not high_incl))
            if not (too_low or too_high):
                continue
            lo = "" if low is None else f"{'[' if low_incl else '('}{low:g}"
            hi = "" if high is None else f"{high:g}{']' if high_incl else ')'}"
            bounds = (
                f"in {lo}, {hi}"
                if lo and hi
                else (f">= {low:g}" if low_incl else f"> {low:g}")
                if lo
                else f"<= {high:g}"
            )
            shown = f"{value:g}" if isinstance(value, float) else str(value)  # :g overflows on huge ints
            yield Finding(
                doc.path,
                f"'{key}' is {shown}; it must be {bounds}",
                doc.position_of(key),
                hint="a fraction of GPU memory, e.g. 0.9" if key == "gpu_memory_utilization" else None,
            )


@rule("VR306", "model-missing", Severity.ERROR)
def model_missing(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """model.json has no `model`: vLLM silently downloads its default model instead.

    vLLM's EngineArgs has a default model, so an engine started without "model" does not fail: it loads that default
    (from the Hugging Face Hub unless it is cached) in place of the model you meant. The message names the default.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"gpu_memory_utilization": 0.5, "max_model_len": 8192}
    """
    for doc in engine_args_objects(model):
        value = doc.data.get("model")
        if value is None or (isinstance(value, str) and not value.strip()):
            field = ctx.schema.get("model")
            default = field.default if field else None
            suffix = f" ({default})" if default else ""
            yield Finding(
                doc.path,
                f'no "model": vLLM would download its default model{suffix} instead of yours',
                doc.position_of("model"),
                hint='add "model": "<Hugging Face id or local path>"',
            )


@rule("VR307", "trust-remote-code", Severity.WARNING)
def trust_remote_code(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """trust_remote_code runs Python code from the model's repository inside the server.

    With trust_remote_code, Transformers imports the Python files in the model's Hugging Face repository (custom model
    or tokenizer code) and runs them in the server process. Only models that ship their own code need it; pin the
    code you reviewed with "revision".

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "THUDM/chatglm3-6b", "trust_remote_code": true}
    """
    for doc in engine_args_objects(model):
        if doc.data.get("trust_remote_code") is True:
            yield Finding(
                doc.path,
                "trust_remote_code is true: code from the model repository runs in the server",
                doc.position_of("trust_remote_code"),
                hint='pin the model with "revision" (a commit hash) and review its code',
            )


@rule("VR308", "duplicate-key", Severity.WARNING)
def duplicate_key(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """A key written twice in model.json (only the last one counts).

    JSON parsers, Python's included, keep the last value of a repeated key without a warning, so the earlier line
    looks like a setting but has no effect.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {
          "model": "Qwen/Qwen2.5-0.5B-Instruct",
          "max_model_len": 32768,
          "gpu_memory_utilization": 0.5,
          "max_model_len": 8192
        }
    """
    for _, doc in vllm_engine_args(model):
        for key, position in doc.duplicate_keys:
            yield Finding(
                doc.path, f"'{key}' appears more than once; only the last value is used", position, hint="keep one"
            )


@rule("VR309", "deprecated-engine-arg", Severity.WARNING)
def deprecated_engine_arg(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """An engine argument the chosen release marks deprecated.

    Deprecated arguments are still accepted, but vLLM announces their removal and some already have no effect; the
    hint quotes vLLM's help text. Which ones are deprecated depends on the release: the example's argument is
    deprecated in vLLM 0.32.0 (--vllm-version 0.32.0).

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "Qwen/Qwen2.5-0.5B-Instruct", "disable_cascade_attn": true}
    """
    for doc in engine_args_objects(model):
        for key in doc.data:
            field = ctx.schema.get(key)
            if field is not None and field.deprecated:
                yield Finding(
                    doc.path,
                    f"'{key}' is deprecated in vLLM {ctx.schema.vllm_version}",
                    doc.position_of(key),
                    hint=_first_sentence(field.help),
                )


def _first_sentence(text: str | None) -> str | None:
    if not text:
        return None
    return text.strip().split(". ")[0].rstrip(".") + "."


@rule("VR310", "model-path-missing", Severity.WARNING)
def model_path_missing(model: ModelDirectory, ctx: CheckContext) -> Iterator[Finding]:
    """`model` or `tokenizer` is a local path that does not exist here (fine if it exists in the serving container).

    vLLM takes a value that is not an existing directory for a Hugging Face repo id, so a mistyped path fails at load
    with "Repo id must be in the form 'repo_name' or 'namespace/repo_name'" instead of naming the missing directory.

    Example::

        # llm/config.pbtxt
        backend: "vllm"
        # llm/1/model.json
        {"model": "/models/no-such-directory/Qwen2.5-0.5B-Instruct"}
    """
    for doc in engine_args_objects(model):
        for key in ("model", "tokenizer"):
            value = doc.data.get(key)
            if not isinstance(value, str) or not value.strip() or hf.is_repo_id(value, owner_required=False):
                continue
            if path_exists(value) or path_exists(model.path / value):
                continue
            yield Finding(
                doc.path,
                f"'{key}' is {value}, which does not exist here; vLLM would take it for a Hugging Face repo id and "
                "fail at load",
                doc.position_of(key),
                hint="fine if the path exists inside the serving container; otherwise fix it, or give a repo id "
                "(owner/name)",
            )
