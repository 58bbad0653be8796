"""The human-readable form of an estimate."""

from __future__ import annotations

from vllm_repo.estimate.memory import MemoryEstimate


def _mark(est: MemoryEstimate, term: str) -> str:
    return " ~" if est.approximate.get(term) else ""


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
        f"  = KV cache                        {est.kv_cache_gib:>9.2f}{_mark(est, 'kv_cache')}",
    ]
    if est.cudagraph_capture_gib and not est.cudagraph_gib:
        lines.append(f"    CUDA-graph capture outside the budget: ~{est.cudagraph_capture_gib:.2f} GiB")
    lines += [
        "",
        f"  KV cache: {est.kv_bytes_per_token:,} bytes/token, {est.kv_cache_blocks:,} blocks of {est.block_size}, "
        f"{est.kv_cache_tokens:,} tokens",
        f"  maximum concurrency at {est.max_model_len:,} tokens: {est.max_concurrency:.2f}x",
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
