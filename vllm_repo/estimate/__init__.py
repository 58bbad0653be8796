"""Predict vLLM's GPU memory split before the first load: weights, activation peak, CUDA graphs, non-torch
memory and the KV cache left, per GPU rank, and whether vLLM will start. Never imports vLLM or torch."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from vllm_repo.errors import UsageError
from vllm_repo.estimate.architecture import ArchitectureError
from vllm_repo.estimate.gpus import CATALOG, Gpu, UnknownGpuError, find_gpu, resolve_gpu
from vllm_repo.estimate.memory import EstimateError, MemoryEstimate, Recommendation, estimate
from vllm_repo.estimate.model_facts import ModelFacts, ModelFactsError, ModelNotAvailableOffline, load_model_facts
from vllm_repo.estimate.recommend import recommend
from vllm_repo.releases.memory_budget import USAGE_CONTEXTS, resolve_release

__all__ = [
    "CATALOG",
    "EstimateError",
    "Gpu",
    "MemoryEstimate",
    "ModelFactsError",
    "ModelNotAvailableOffline",
    "Recommendation",
    "UnknownGpuError",
    "engine_settings",
    "estimate_for_engine_args",
    "estimate_model",
    "find_gpu",
    "load_model_facts",
    "resolve_gpu",
]

# EngineArgs keys the estimate reads, with their types.
ENGINE_ARG_TYPES: dict[str, type] = {
    "tensor_parallel_size": int,
    "pipeline_parallel_size": int,
    "gpu_memory_utilization": float,
    "max_model_len": int,
    "max_num_seqs": int,
    "max_num_batched_tokens": int,
    "dtype": str,
    "quantization": str,
    "kv_cache_dtype": str,
    "enforce_eager": bool,
    "block_size": int,
    "enable_chunked_prefill": bool,
    "enable_expert_parallel": bool,
    "kv_cache_memory_bytes": int,
}


def _coerce(key: str, value: Any) -> Any:
    kind = ENGINE_ARG_TYPES[key]
    if value is None:
        return None
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise UsageError(f"{key}: expected true or false, got {value!r}")
    if kind is int:
        if isinstance(value, bool):
            raise UsageError(f"{key}: expected an integer, got {value!r}")
        if isinstance(value, float) and value.is_integer():
            return int(value)
        try:
            return int(str(value).strip())
        except ValueError:
            raise UsageError(f"{key}: expected an integer, got {value!r}") from None
    if kind is float:
        if isinstance(value, bool):
            raise UsageError(f"{key}: expected a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise UsageError(f"{key}: expected a number, got {value!r}") from None
    return str(value)


def engine_settings(engine_args: dict[str, Any]) -> dict[str, Any]:
    """The estimate's keyword arguments from an EngineArgs-style dict (model.json); raises UsageError."""
    try:
        return {key: _coerce(key, engine_args[key]) for key in ENGINE_ARG_TYPES if key in engine_args}
    except OverflowError as exc:  # float(10**400): a value no GPU setting can take
        raise UsageError(f"a setting is out of range: {exc}") from None


def estimate_model(
    model: str,
    gpu: str | float | Gpu,
    *,
    num_gpus: int | None = None,
    vllm_version: str | None = None,
    offline: bool | None = None,
    revision: str | None = None,
    usage_context: str = "engine",
    target_concurrency: float | None = None,
    base: Path | None = None,
    facts: ModelFacts | None = None,
    **settings: Any,
) -> MemoryEstimate:
    """Estimate for a model (HF repo id or local directory) on a GPU, with EngineArgs-named settings.

    num_gpus: GPUs available: tensor_parallel_size x pipeline_parallel_size may not exceed it, and the
    tensor_parallel_size recommendation stays within it (default 8).
    Raises UsageError: ModelFactsError (model unreadable), UnknownGpuError, EstimateError (settings vLLM rejects),
    or a value of the wrong form."""
    if usage_context not in USAGE_CONTEXTS:
        raise UsageError(f"usage context must be one of {', '.join(USAGE_CONTEXTS)}, got '{usage_context}'")
    gpu_ = resolve_gpu(gpu)
    release, reason = resolve_release(vllm_version)
    facts = facts or load_model_facts(model, offline=offline, revision=revision, base=base)
    pp = settings.get("pipeline_parallel_size") or 1
    if settings.get("tensor_parallel_size") is None:
        settings["tensor_parallel_size"] = 1  # vLLM's default; num_gpus bounds the recommendations
    if num_gpus is not None and settings["tensor_parallel_size"] * pp > num_gpus:
        raise EstimateError(
            f"tensor_parallel_size x pipeline_parallel_size = {settings['tensor_parallel_size'] * pp}"
            f" needs more GPUs than the {num_gpus} available"
        )
    run = functools.partial(_run, facts, gpu_, release, reason, usage_context, settings)
    result = run()
    result.recommendations = recommend(
        result, run, num_heads=facts.arch.num_heads, max_gpus=num_gpus, target_concurrency=target_concurrency
    )
    return result


def _run(
    facts: ModelFacts, gpu: Gpu, release: Any, reason: str, usage_context: str, settings: dict[str, Any], **changes: Any
) -> MemoryEstimate:
    merged = {**settings, **changes}
    return estimate(facts, gpu, release, release_reason=reason, usage_context=usage_context, **merged)


def estimate_for_engine_args(
    engine_args: dict[str, Any],
    gpu: str | float | Gpu,
    num_gpus: int | None = None,
    vllm_version: str | None = None,
    offline: bool = True,
    base: Path | None = None,
) -> MemoryEstimate | None:
    """The estimate for a model.json's engine args, for validate: None when the model's config.json is not
    reachable (offline: a local directory or the HF cache only) or the settings can't be read as numbers.

    Raises UnknownGpuError for an unknown GPU name and EstimateError for settings vLLM rejects outright
    (e.g. a tensor_parallel_size that doesn't divide the attention heads)."""
    model = engine_args.get("model")
    if not isinstance(model, str) or not model:
        return None
    try:
        settings = engine_settings(engine_args)
    except UsageError:  # a value of the wrong form is VR303's finding
        return None
    try:
        facts = load_model_facts(model, offline=offline, revision=engine_args.get("revision"), base=base)
        facts.arch.check_decoder_shape()
    except (ModelFactsError, ArchitectureError):
        return None
    return estimate_model(model, gpu, num_gpus=num_gpus, vllm_version=vllm_version, facts=facts, **settings)
