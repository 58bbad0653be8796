"""What to change when the estimate says vLLM won't start (or leaves too little KV cache): the smallest
tensor_parallel_size that fits, the gpu_memory_utilization that leaves the wanted concurrency, the longest
max_model_len that fits, and an fp8 KV cache when that is what makes the difference."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard

from vllm_repo.estimate.gpus import GiB
from vllm_repo.estimate.memory import CUDA_CONTEXT_GIB, EstimateError, MemoryEstimate, Recommendation

Estimator = Callable[..., MemoryEstimate]


def _try(run: Estimator, **changes: object) -> MemoryEstimate | None:
    try:
        return run(**changes)
    except EstimateError:
        return None


def _meets(est: MemoryEstimate | None, concurrency: float) -> TypeGuard[MemoryEstimate]:
    """An estimate (not None: the re-estimate ran) that fits with the wanted concurrency."""
    return est is not None and est.fits and est.max_concurrency >= concurrency


def recommend(
    est: MemoryEstimate,
    run: Estimator,
    *,
    num_heads: int,
    max_gpus: int | None = None,
    target_concurrency: float | None = None,
    max_utilization: float | None = None,
) -> list[Recommendation]:
    """`run(**changes)` re-estimates with some settings changed; est is the estimate for the settings as given.
    max_utilization: the most gpu_memory_utilization may be (what other engines on the GPU leave, less a margin)."""
    want = target_concurrency or 1.0
    ceiling = round(1 - (CUDA_CONTEXT_GIB * GiB) / (est.gpu_total_gib * GiB) - 0.005, 2)
    if max_utilization is not None:
        ceiling = min(ceiling, max_utilization)
    if est.error and est.error.startswith("Free memory on device") and ceiling > 0:
        return [
            Recommendation(
                setting="gpu_memory_utilization",
                value=ceiling,
                reason="vLLM refuses to start when less memory is free than the utilization asks "
                "for; the CUDA context takes ~0.5 GiB before that check",
            )
        ]
    if _meets(est, want):
        return _graph_headroom(est)
    found = (
        _wider_tensor_parallel(est, run, num_heads, max_gpus or 8, want),
        _higher_utilization(est, run, ceiling, want),
        _fp8_kv_cache(est, run, want),
    )
    recs = [rec for rec in found if rec is not None]
    fitting_len = _longest_len(est, run, want)
    if fitting_len:
        recs.append(
            Recommendation(
                setting="max_model_len",
                value=fitting_len,
                reason=f"longest context that fits {want:g} request(s) with the other settings unchanged",
            )
        )
    return recs


def _wider_tensor_parallel(
    est: MemoryEstimate, run: Estimator, num_heads: int, max_gpus: int, want: float
) -> Recommendation | None:
    """The smallest larger tensor_parallel_size (a power of two dividing the heads, within max_gpus) that fits."""
    for tp in (1, 2, 4, 8, 16, 32):
        if tp <= est.tensor_parallel_size or tp * est.pipeline_parallel_size > max_gpus or num_heads % tp:
            continue
        candidate = _try(run, tensor_parallel_size=tp)
        if _meets(candidate, want):
            return Recommendation(
                setting="tensor_parallel_size",
                value=tp,
                reason=f"smallest tensor_parallel_size that divides the {num_heads} attention heads and fits: "
                f"{candidate.kv_cache_tokens:,} KV tokens, max concurrency {candidate.max_concurrency:.2f}x",
            )
    return None


def _higher_utilization(est: MemoryEstimate, run: Estimator, ceiling: float, want: float) -> Recommendation | None:
    """The lowest gpu_memory_utilization up to ``ceiling``, in steps of 0.01, that fits."""
    util = round(est.gpu_memory_utilization + 0.01, 2)
    while util <= ceiling:
        candidate = _try(run, gpu_memory_utilization=util)
        if _meets(candidate, want):
            return Recommendation(
                setting="gpu_memory_utilization",
                value=util,
                reason=f"leaves {candidate.kv_cache_gib:.2f} GiB for the KV cache: max concurrency "
                f"{candidate.max_concurrency:.2f}x at {est.max_model_len:,} tokens (wanted {want:g}x)",
            )
        util = round(util + 0.01, 2)
    return None


def _fp8_kv_cache(est: MemoryEstimate, run: Estimator, want: float) -> Recommendation | None:
    """An fp8 KV cache, where the cache is 16-bit and halving it makes the difference."""
    if est.kv_cache_dtype != "auto" or est.dtype_bytes < 2:
        return None
    candidate = _try(run, kv_cache_dtype="fp8")
    if not _meets(candidate, want):
        return None
    return Recommendation(
        setting="kv_cache_dtype",
        value="fp8",
        reason=f"halves KV bytes per token: {candidate.kv_cache_tokens:,} KV tokens, max concurrency "
        f"{candidate.max_concurrency:.2f}x (small accuracy cost)",
    )


def _longest_len(est: MemoryEstimate, run: Estimator, want: float) -> int | None:
    lo, hi, best = 1, est.max_model_len - 1, None
    if hi < 1:
        return None
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = _try(run, max_model_len=mid)
        if _meets(candidate, want):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    if best and best > 4096:
        best = best // 1024 * 1024  # a round number people can type
    return best


def _graph_headroom(est: MemoryEstimate) -> list[Recommendation]:
    """Where CUDA graphs are captured outside the budget, they must fit in what utilization leaves free."""
    if est.enforce_eager or est.cudagraph_gib > 0 or est.cudagraph_capture_gib == 0:
        return []
    headroom = est.gpu_total_gib * (1 - est.gpu_memory_utilization) - CUDA_CONTEXT_GIB
    if est.cudagraph_capture_gib <= headroom:
        return []
    util = round(est.gpu_memory_utilization - (est.cudagraph_capture_gib - headroom) / est.gpu_total_gib - 0.01, 2)
    return [
        Recommendation(
            setting="gpu_memory_utilization",
            value=util,
            reason=f"CUDA-graph capture (~{est.cudagraph_capture_gib:.2f} GiB) happens after the KV cache is allocated "
            f"and only {max(headroom, 0):.2f} GiB is left outside the budget; or set enforce_eager",
        )
    ]
