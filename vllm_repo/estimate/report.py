"""The human-readable form of an estimate."""

from __future__ import annotations

from vllm_repo.estimate.memory import MemoryEstimate


def _mark(est: MemoryEstimate, term: str) -> str:
    return " ~" if est.approximate.get(term) else ""


def _kv_cache_line(est: MemoryEstimate) -> str:
    if est.kv_cache_gib < 0:  # what the other terms take beyond the budget: there is no KV cache to print
        return f"  = KV cache                             none: the terms above exceed it by {-est.kv_cache_gib:.2f}"
    return f"  = KV cache                        {est.kv_cache_gib:>9.2f}{_mark(est, 'kv_cache')}"


def _concurrency_line(est: MemoryEstimate) -> str:
    """vLLM's own figure (the requests of max_model_len tokens the KV cache holds), and what max_num_seqs leaves of it:
    vLLM never runs more requests at once than max_num_seqs, whatever room the cache has."""
    line = f"  maximum concurrency at {est.max_model_len:,} tokens: {est.max_concurrency:.2f}x (vLLM's figure)"
    if est.max_concurrency > est.max_num_seqs:
        line += f"; max_num_seqs {est.max_num_seqs} caps the requests running at once"
    return line


def render(est: MemoryEstimate) -> str:
    rank = "per GPU rank" if est.tensor_parallel_size * est.pipeline_parallel_size > 1 else "on the GPU"
    lines = [
        f"{est.model} on {est.gpu} ({est.gpu_total_gib:.2f} GiB{_mark(est, 'gpu')}), vLLM {est.vllm_version} "
        f"({est.vllm_version_reason}), batch defaults of the {est.usage_context} usage context",
        f"tensor_parallel_size {est.tensor_parallel_size}, pipeline_parallel_size {est.pipeline_parallel_size}, "
        f"gpu_memory_utilization {est.gpu_memory_utilization}, max_model_len {est.max_model_len:,}, "
        f"max_num_batched_tokens {est.max_num_batched_tokens:,}, max_num_seqs {est.max_num_seqs}",
        "",
        f"  Memory {rank}                         GiB",
        f"  requested (total x utilization)   {est.requested_gib:>9.2f}",
        f"  - weights                         {est.weights_gib:>9.2f}{_mark(est, 'weights')}",
        f"  - activation peak                 {est.activation_gib:>9.2f}{_mark(est, 'activation')}",
        f"  - non-torch                       {est.non_torch_gib:>9.2f}{_mark(est, 'non_torch')}",
        f"  - CUDA graphs (budgeted)          {est.cudagraph_gib:>9.2f}"
        f"{_mark(est, 'cudagraph') if est.cudagraph_gib else ''}",
        _kv_cache_line(est),
    ]
    if est.cudagraph_capture_gib and not est.cudagraph_gib:
        lines.append(f"    CUDA-graph capture outside the budget: ~{est.cudagraph_capture_gib:.2f} GiB")
    lines += [
        "",
        f"  KV cache: {est.kv_bytes_per_token:,} bytes/token, {est.kv_cache_blocks:,} blocks of {est.block_size}, "
        f"{est.kv_cache_tokens:,} tokens",
        _concurrency_line(est),
        "",
        "  fits: yes" if est.fits else f"  fits: NO - vLLM would fail with: {est.error}",
    ]
    if any(est.approximate.values()):
        lines.append("  (~ approximate term)")
    for note in est.notes:
        lines.append(f"  note: {note}")
    if est.recommendations:
        lines.append("")
        lines.append("Recommendations:")
        for rec in est.recommendations:
            lines.append(f"  {rec.setting} = {rec.value}: {rec.reason}")
    return "\n".join(lines)
