"""The per-rank memory split vLLM will compute at start-up, and whether it will start.

vLLM (vllm/v1/worker/gpu_worker.py determine_available_memory):
    requested  = total x gpu_memory_utilization
    kv_cache   = requested - weights - activation peak - non-torch - CUDA-graph estimate (since 0.21)
then divides kv_cache into blocks (kv_cache.py) and refuses to start when one request at max_model_len does not
fit (vllm/v1/core/kv_cache_utils.py _check_enough_kv_cache_memory).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from vllm_repo.errors import UsageError
from vllm_repo.estimate import activation, kv_cache
from vllm_repo.estimate.gpus import GiB, Gpu
from vllm_repo.estimate.model_facts import ModelFacts
from vllm_repo.estimate.units import compared_sizes
from vllm_repo.estimate.weights import WeightEstimate, model_dtype_bytes, weights_per_rank
from vllm_repo.hf import derived_max_model_len
from vllm_repo.releases.memory_budget import Release
from vllm_repo.repository.engine_settings import EngineSettings

# Memory in use before vLLM's first snapshot (CUDA context, cuBLAS): 0.51 GiB on the H200 run.
CUDA_CONTEXT_GIB = 0.5


def _gib(value: float) -> float:
    return round(value / GiB, 3)


class Recommendation(BaseModel):
    setting: str
    value: int | float | str  # the setting's new value: a size, a utilization, a dtype name
    reason: str


class MemoryEstimate(BaseModel):
    """Per GPU rank. *_gib are GiB (2**30 bytes), as vLLM prints them."""

    model: str
    gpu: str
    gpu_total_gib: float
    vllm_version: str
    vllm_version_reason: str
    usage_context: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    gpu_memory_utilization: float
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    block_size: int
    dtype_bytes: int
    kv_cache_dtype: str
    enforce_eager: bool

    requested_gib: float
    weights_gib: float
    activation_gib: float
    cudagraph_gib: float = Field(description="CUDA-graph memory vLLM subtracts from the budget (0 where it does not)")
    cudagraph_capture_gib: float = Field(description="memory the graph capture takes after the KV cache is allocated")
    non_torch_gib: float
    kv_cache_gib: float
    kv_bytes_per_token: int
    kv_cache_blocks: int
    kv_cache_tokens: int
    max_concurrency: float
    kv_needed_one_request_gib: float

    fits: bool
    error: str | None = None
    estimated_max_model_len: int | None = None
    model_max_model_len: int | None = Field(
        default=None, description="the longest context the model's config.json allows (None where it names none)"
    )
    approximate: dict[str, bool] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    weights_source: str = ""
    recommendations: list[Recommendation] = Field(default_factory=list)


class EstimateError(UsageError):
    """Settings vLLM itself would reject before allocating anything (the message says what to change)."""


def estimate(
    facts: ModelFacts,
    gpu: Gpu,
    release: Release,
    settings: EngineSettings,
    *,
    release_reason: str = "",
    usage_context: str = "engine",
    model_runner_v2: bool | None = None,
) -> MemoryEstimate:
    """model_runner_v2: force Model Runner V2 on or off (VLLM_USE_V2_MODEL_RUNNER); default: the release's choice."""
    sizes = _checked_sizes(facts, gpu, release, settings, usage_context)
    eager = bool(settings.enforce_eager)
    dtype_bytes = model_dtype_bytes(facts.arch, settings.dtype)
    budget = _draw_budget(
        facts, gpu, release, settings, sizes, dtype_bytes=dtype_bytes, model_runner_v2=model_runner_v2
    )
    weights, terms, available = budget.weights, budget.terms, budget.available
    kv = _kv_capacity(facts, release, settings, sizes, available=available, dtype_bytes=dtype_bytes)
    verdict = _startup_verdict(release, sizes, budget, kv, total=gpu.total_bytes)

    return MemoryEstimate(
        model=facts.model,
        gpu=gpu.name,
        gpu_total_gib=round(gpu.total_gib, 2),
        vllm_version=str(release.version),
        vllm_version_reason=release_reason,
        usage_context=usage_context,
        tensor_parallel_size=sizes.tp,
        pipeline_parallel_size=sizes.pp,
        gpu_memory_utilization=sizes.util,
        max_model_len=sizes.max_model_len,
        max_num_batched_tokens=sizes.tokens,
        max_num_seqs=sizes.seqs,
        block_size=kv.layout.block_size,
        dtype_bytes=dtype_bytes,
        kv_cache_dtype=settings.kv_cache_dtype or "auto",
        enforce_eager=eager,
        requested_gib=_gib(budget.requested),
        weights_gib=_gib(weights.bytes_per_rank),
        activation_gib=_gib(terms.activation_bytes),
        cudagraph_gib=_gib(terms.cudagraph_bytes),
        cudagraph_capture_gib=_gib(terms.cudagraph_capture_bytes),
        non_torch_gib=_gib(terms.non_torch_bytes),
        kv_cache_gib=_gib(available),
        kv_bytes_per_token=kv.layout.bytes_per_token,
        kv_cache_blocks=kv.blocks,
        kv_cache_tokens=kv.tokens,
        max_concurrency=round(kv.concurrency, 2),
        kv_needed_one_request_gib=_gib(kv.layout.needed_bytes_one_request),
        fits=verdict.error is None,
        error=verdict.error,
        estimated_max_model_len=verdict.estimated_max_model_len,
        model_max_model_len=sizes.model_max,
        approximate={
            "gpu": not gpu.measured,
            "weights": weights.approximate,
            "activation": True,
            "cudagraph": not eager,
            "non_torch": True,
            "kv_cache": kv.layout.approximate,
        },
        notes=budget.notes + kv.layout.notes,
        weights_source=weights.source,
    )


@dataclass(frozen=True)
class _Sizes:
    """The sizes estimate reads from the settings, defaulted and checked as vLLM checks them."""

    tp: int
    pp: int
    util: float
    max_model_len: int
    model_max: int | None  # the longest context config.json allows (None where it names none)
    tokens: int  # max_num_batched_tokens, the scheduler's
    seqs: int  # max_num_seqs, the scheduler's


def _checked_sizes(
    facts: ModelFacts, gpu: Gpu, release: Release, settings: EngineSettings, usage_context: str
) -> _Sizes:
    """Refuses what vLLM refuses before allocating anything (EstimateError)."""
    arch = facts.arch
    # Unset sizes are vLLM's default of 1; a value below 1 is refused below, as vLLM refuses it.
    tp = 1 if settings.tensor_parallel_size is None else settings.tensor_parallel_size
    pp = 1 if settings.pipeline_parallel_size is None else settings.pipeline_parallel_size
    if tp < 1 or pp < 1:
        raise EstimateError("tensor_parallel_size and pipeline_parallel_size must be at least 1")
    if arch.num_heads % tp:
        raise EstimateError(
            f"Total number of attention heads ({arch.num_heads}) must be divisible by tensor "
            f"parallel size ({tp}): use a tensor_parallel_size that divides {arch.num_heads}"
        )
    util = settings.gpu_memory_utilization_or(release.default_gpu_memory_utilization)
    if not 0 < util <= 1:
        raise EstimateError(f"gpu_memory_utilization must be in (0, 1], got {util}")
    model_max = derived_max_model_len(facts.config)
    max_model_len = settings.max_model_len
    if max_model_len is None:
        if model_max is None:
            raise EstimateError("config.json gives no maximum context length; pass max_model_len")
        max_model_len = model_max
    if max_model_len < 1:
        raise EstimateError(f"max_model_len must be positive, got {max_model_len}")
    tokens, seqs = release.scheduler_limits(
        gpu,
        usage_context,
        max_model_len,
        max_num_batched_tokens=settings.max_num_batched_tokens,
        max_num_seqs=settings.max_num_seqs,
        enable_chunked_prefill=settings.enable_chunked_prefill,
        world_size=tp * pp,
    )
    return _Sizes(tp=tp, pp=pp, util=util, max_model_len=max_model_len, model_max=model_max, tokens=tokens, seqs=seqs)


def _profile_terms(
    facts: ModelFacts,
    release: Release,
    settings: EngineSettings,
    sizes: _Sizes,
    *,
    dtype_bytes: int,
    model_runner_v2: bool | None,
) -> activation.ProfileTerms:
    """What vLLM's profiling run subtracts from the budget besides the weights."""
    arch = facts.arch
    runner_v2 = (
        release.uses_model_runner_v2(is_moe=arch.is_moe, is_hybrid=arch.is_hybrid)
        if model_runner_v2 is None
        else model_runner_v2
    )
    cg_subtracted = (
        not release.v0_engine
        and release.cudagraph_estimate_subtracted
        and (not runner_v2 or release.model_runner_v2_profiles_cudagraphs)
    )
    return activation.profile_terms(
        arch,
        max_num_batched_tokens=sizes.tokens,
        max_num_seqs=sizes.seqs,
        tp=sizes.tp,
        dtype_bytes=dtype_bytes,
        enforce_eager=bool(settings.enforce_eager),
        v0_engine=release.v0_engine,
        model_runner_v2=runner_v2,
        cudagraph_subtracted=cg_subtracted,
        ep=bool(settings.enable_expert_parallel),
    )


@dataclass(frozen=True)
class _Budget:
    """The memory vLLM sets aside before the KV cache, and what is left for it."""

    weights: WeightEstimate
    terms: activation.ProfileTerms
    requested: int  # total x gpu_memory_utilization
    available: int  # for the KV cache
    notes: list[str]


def _draw_budget(
    facts: ModelFacts,
    gpu: Gpu,
    release: Release,
    settings: EngineSettings,
    sizes: _Sizes,
    *,
    dtype_bytes: int,
    model_runner_v2: bool | None,
) -> _Budget:
    weights = weights_per_rank(
        facts, tp=sizes.tp, pp=sizes.pp, dtype=settings.dtype, quantization=settings.quantization
    )
    notes = [weights.note] if weights.note else []
    terms = _profile_terms(facts, release, settings, sizes, dtype_bytes=dtype_bytes, model_runner_v2=model_runner_v2)
    notes.extend(terms.notes)
    if facts.config.get("vision_config") or facts.config.get("audio_config"):
        notes.append("multimodal encoder profiling is not modelled: vLLM's activation peak will be higher")
    requested = int(gpu.total_bytes * sizes.util)
    available = (
        requested - weights.bytes_per_rank - terms.activation_bytes - terms.non_torch_bytes - terms.cudagraph_bytes
    )
    if settings.kv_cache_memory_bytes:
        available = settings.kv_cache_memory_bytes
        notes.append("kv_cache_memory_bytes is set: vLLM skips the utilization budget")
    return _Budget(weights=weights, terms=terms, requested=requested, available=available, notes=notes)


@dataclass(frozen=True)
class _KVCapacity:
    """The KV cache vLLM divides the available memory into."""

    specs: list[kv_cache.LayerKV]  # the layers of the stage with the most of them
    layout: kv_cache.KVLayout
    blocks: int
    tokens: int  # the tokens the blocks hold
    concurrency: float


def _kv_capacity(
    facts: ModelFacts,
    release: Release,
    settings: EngineSettings,
    sizes: _Sizes,
    *,
    available: int,
    dtype_bytes: int,
) -> _KVCapacity:
    kv_bytes = kv_cache.kv_dtype_bytes(settings.kv_cache_dtype, dtype_bytes)
    specs = kv_cache.layer_specs(facts.arch, tp=sizes.tp, kv_bytes=kv_bytes, kv_cache_dtype=settings.kv_cache_dtype)
    if sizes.pp > 1:
        specs = specs[: -(-len(specs) // sizes.pp)]  # the stage with the most layers
    lay = kv_cache.layout(
        specs,
        max_model_len=sizes.max_model_len,
        max_num_batched_tokens=sizes.tokens,
        block_size=settings.block_size or 16,
        in_flight_factor=release.batches_in_flight,
    )
    blocks = lay.num_blocks(max(available, 0))
    if release.v0_engine:
        kv_tokens = blocks * lay.block_size
        concurrency = kv_tokens / sizes.max_model_len
    else:
        kv_tokens = kv_cache.kv_tokens(lay, blocks, sizes.max_model_len)
        concurrency = kv_cache.max_concurrency(lay, blocks)
    return _KVCapacity(specs=specs, layout=lay, blocks=blocks, tokens=kv_tokens, concurrency=concurrency)


@dataclass(frozen=True)
class _StartupVerdict:
    error: str | None  # vLLM's refusal, in its words where it has some; None where it starts
    estimated_max_model_len: int | None = None


def _startup_verdict(
    release: Release, sizes: _Sizes, budget: _Budget, kv: _KVCapacity, *, total: int
) -> _StartupVerdict:
    """Whether vLLM starts with this split, and if not, why."""
    verdict = _budget_verdict(release, sizes, kv, total=total, requested=budget.requested, available=budget.available)
    weights_bytes = budget.weights.bytes_per_rank
    # Loading the weights fails before any budget is drawn up: that error wins (the length estimate stays).
    if weights_bytes + CUDA_CONTEXT_GIB * GiB > total:
        return _StartupVerdict(
            f"CUDA out of memory while loading weights: {_gib(weights_bytes):.2f} GiB per GPU does "
            f"not fit in {_gib(total):.2f} GiB",
            verdict.estimated_max_model_len,
        )
    return verdict


def _budget_verdict(
    release: Release, sizes: _Sizes, kv: _KVCapacity, *, total: int, requested: int, available: int
) -> _StartupVerdict:
    """vLLM's first refusal of the memory budget, in the order it checks."""
    max_model_len, model_max, lay = sizes.max_model_len, sizes.model_max, kv.layout
    if model_max is not None and max_model_len > model_max:
        return _StartupVerdict(
            f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
            f"(max_position_embeddings={model_max} in the model's config.json)"
        )
    if not release.v0_engine and requested > total - CUDA_CONTEXT_GIB * GiB * (1 + 0.2 * (sizes.tp > 1)):
        return _StartupVerdict(
            f"Free memory on device ({_gib(total - CUDA_CONTEXT_GIB * GiB):.2f}/{_gib(total):.2f} GiB) on "
            f"startup is less than desired GPU memory utilization ({sizes.util}, {_gib(requested):.2f} GiB)"
        )
    if available <= 0:
        return _StartupVerdict(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine."
        )
    if release.v0_engine:
        if kv.tokens < max_model_len:
            return _StartupVerdict(
                f"The model's max seq len ({max_model_len}) is larger than the maximum number of tokens that "
                f"can be stored in KV cache ({kv.tokens}). Try increasing `gpu_memory_utilization` or "
                "decreasing `max_model_len` when initializing the engine.",
                kv.tokens,
            )
        return _StartupVerdict(None)
    reserve = lay.bytes_per_block if release.reserves_null_block else 0
    if lay.needed_bytes_one_request <= available - reserve:
        return _StartupVerdict(None)
    est_len = max_len_that_fits(
        kv.specs, available - reserve, max_model_len, sizes.tokens, lay.block_size, release.batches_in_flight
    )
    # vLLM's words, with figures that differ as printed (vLLM's two decimals of GiB can read "0.00 ... 0.00").
    needed, there = compared_sizes(lay.needed_bytes_one_request, available - reserve)
    return _StartupVerdict(
        f"To serve at least one request with the model's max seq len ({max_model_len}), "
        f"({needed} KV cache is needed, which is larger than the available KV cache memory ({there})"
        f"{' less the block vLLM keeps back' if reserve else ''}). Based on the available memory, the "
        f"estimated maximum model length is {est_len}.",
        est_len,
    )


def max_len_that_fits(
    specs: list[kv_cache.LayerKV], available: int, upper: int, tokens: int, block_size: int, in_flight: int
) -> int:
    """vLLM's estimate_max_model_len: the longest max_model_len whose one-request KV need fits."""

    def fits(length: int) -> bool:
        lay = kv_cache.layout(
            specs,
            max_model_len=length,
            max_num_batched_tokens=tokens,
            block_size=block_size,
            in_flight_factor=in_flight,
        )
        return lay.needed_bytes_one_request <= available

    if available <= 0 or not fits(1):
        return 0
    lo, hi, best = 1, upper, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best
