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
from vllm_repo.releases.memory_budget import USAGE_CONTEXTS, Release, resolve_release
from vllm_repo.repository.engine_settings import EngineSettings, read_engine_settings

__all__ = [
    "CATALOG",
    "ArchitectureError",
    "EstimateError",
    "Gpu",
    "MemoryEstimate",
    "ModelFactsError",
    "ModelNotAvailableOffline",
    "Recommendation",
    "UnknownGpuError",
    "estimate_for_engine_args",
    "estimate_model",
    "find_gpu",
    "load_model_facts",
    "resolve_gpu",
]


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
    settings: EngineSettings | None = None,
    model_runner_v2: bool | None = None,
    max_utilization: float | None = None,
) -> MemoryEstimate:
    """Estimate for a model (HF repo id or local directory) on a GPU with ``settings`` (vLLM's defaults where None).
    model_runner_v2: force Model Runner V2 on or off (VLLM_USE_V2_MODEL_RUNNER); default: the release's choice.

    num_gpus: GPUs available: tensor_parallel_size x pipeline_parallel_size may not exceed it, and the
    tensor_parallel_size recommendation stays within it (default 8). max_utilization: the most a recommended
    gpu_memory_utilization may be (what other engines on the GPU leave).
    Raises UsageError: ModelFactsError (model unreadable), UnknownGpuError, EstimateError (settings vLLM rejects),
    or a value of the wrong form."""
    if usage_context not in USAGE_CONTEXTS:
        raise UsageError(f"usage context must be one of {', '.join(USAGE_CONTEXTS)}, got '{usage_context}'")
    gpu_ = resolve_gpu(gpu)
    release, reason = resolve_release(vllm_version)
    facts = facts or load_model_facts(model, offline=offline, revision=revision, base=base)
    settings = settings or EngineSettings()
    if settings.tensor_parallel_size is None:
        settings = settings.replace(tensor_parallel_size=1)  # vLLM's default; num_gpus bounds the recommendations
    world = settings.tp * settings.pp
    if num_gpus is not None and world > num_gpus:
        raise EstimateError(
            f"tensor_parallel_size x pipeline_parallel_size = {world} needs more GPUs than the {num_gpus} available"
        )
    run = functools.partial(_run, facts, gpu_, release, reason, usage_context, model_runner_v2, settings)
    result = run()
    result.recommendations = recommend(
        result,
        run,
        num_heads=facts.arch.num_heads,
        max_gpus=num_gpus,
        target_concurrency=target_concurrency,
        max_utilization=max_utilization,
    )
    return result


def _run(
    facts: ModelFacts,
    gpu: Gpu,
    release: Release,
    reason: str,
    usage_context: str,
    model_runner_v2: bool | None,
    settings: EngineSettings,
    **changes: Any,
) -> MemoryEstimate:
    """The estimate with some settings changed: what a recommendation is tried with."""
    return estimate(
        facts,
        gpu,
        release,
        settings.replace(**changes),
        release_reason=reason,
        usage_context=usage_context,
        model_runner_v2=model_runner_v2,
    )


def estimate_for_engine_args(
    engine_args: dict[str, Any],
    gpu: str | float | Gpu,
    num_gpus: int | None = None,
    vllm_version: str | None = None,
    offline: bool = True,
    base: Path | None = None,
    max_utilization: float | None = None,
) -> MemoryEstimate | None:
    """The estimate for a model.json's engine args, for validate: None when the model's config.json is not
    reachable (offline: a local directory or the HF cache only) or the settings can't be read as numbers.

    Raises UnknownGpuError for an unknown GPU name and EstimateError for settings vLLM rejects outright
    (e.g. a tensor_parallel_size that doesn't divide the attention heads)."""
    try:
        settings = read_engine_settings(engine_args, strict=True)
    except UsageError:  # a value of the wrong form is VR303's finding
        return None
    model = settings.model
    if not model:
        return None
    try:
        facts = load_model_facts(model, offline=offline, revision=settings.revision, base=base)
        facts.arch.check_decoder_shape()
    except (ModelFactsError, ArchitectureError):
        return None
    return estimate_model(
        model,
        gpu,
        num_gpus=num_gpus,
        vllm_version=vllm_version,
        facts=facts,
        settings=settings,
        max_utilization=max_utilization,
    )
