"""The non-weight, non-KV terms of vLLM's budget: activation peak of the profile run, CUDA-graph memory and
non-torch memory. Their constants come from real vLLM 0.26.0 runs on an H200 (bench/data/h200_calibration.json,
fitted by bench/calibrate.py) and are cross-checked against public start-up logs (bench/estimate_accuracy.py).

Profile run (vllm/v1/worker/gpu_model_runner.py profile_run): one forward pass over max_num_batched_tokens
tokens, then the sampler over min(max_num_seqs, max_num_batched_tokens) rows of logits. The forward peak sits in
the MLP (gate/up output, activation output, residual stream), hence a linear form in hidden and intermediate size.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_repo.estimate.architecture import Architecture
from vllm_repo.estimate.gpus import GiB, MiB

# Fitted on the five eager runs (max 1% off each): peak = C0 + tokens * (A*hidden + B*intermediate) * dtype/2.
ACTIVATION_BASE_GIB = 0.0296
ACTIVATION_BYTES_PER_HIDDEN = 2.08
ACTIVATION_BYTES_PER_INTERMEDIATE = 7.14
# Sampler cost per logit (rows x vocabulary). The V0 engine and Model Runner V1 profile PyTorch's top-k/top-p
# path (top_k = vocab - 1, top_p < 1: fp32 logits, a sorted copy with its indices, softmax, cumulative sums):
# 14.7 bytes a logit measured on vLLM 0.26.0 with Model Runner V1 (Llama-3-8B, 1024 rows: 1.89 GiB peak where
# V2 peaked at 0.88). Model Runner V2's sampler stayed below the forward peak in every run, which bounds it to
# <= 3.7 bytes a logit; 2 (the bf16 logits) is used.
SAMPLER_BYTES_PER_LOGIT_SORTING = 14.7
SAMPLER_BYTES_PER_LOGIT_V2 = 2
# Model Runner V2 with torch.compile: the compiled profile run never peaked below ~1 GiB (1.01 GiB measured for
# Llama-3-8B at 2048 tokens where eager peaked at 0.24; 1.04 GiB in a public 0.26.0 log of a 7B model).
COMPILED_V2_PEAK_FLOOR_GIB = 1.02
# CUDA graphs: per captured graph per decoder layer, plus the activations of the largest captured batch.
# Measured: 0.41 GiB (Llama-3-8B, 54 graphs) and 0.89 GiB (Qwen2.5-7B, 102 graphs).
CUDAGRAPH_MIB_PER_LAYER_GRAPH = 0.26
# Non-torch memory growth after vLLM's start-up snapshot (NCCL/cuBLAS/workspace allocations). Small and
# hardware-dependent: 0.22 GiB on the H200, 0.02-0.21 GiB in public V1 logs, 0.25-0.35 GiB in V0 logs.
NON_TORCH_GIB_V1 = 0.12
NON_TORCH_GIB_V1_TP = 0.2
NON_TORCH_GIB_V0 = 0.3


def forward_peak_bytes(arch: Architecture, tokens: int, tp: int, dtype_bytes: int, ep: bool = False) -> float:
    h = arch.hidden_size
    inner = arch.intermediate_size / tp
    if arch.is_moe:
        # fused MoE keeps gate/up, activation and output caches for tokens x top-k slots (whole experts under EP)
        moe_i = arch.moe_intermediate_size / (1 if ep else tp)
        dense_layers = any(not arch.is_moe_layer(i) for i in range(arch.num_layers))
        moe_inner = (
            arch.experts_per_token * (moe_i + 2 * h / ACTIVATION_BYTES_PER_INTERMEDIATE)
            + arch.shared_expert_intermediate_size / tp
        )
        inner = max(inner if dense_layers else 0.0, moe_inner)
    per_token = ACTIVATION_BYTES_PER_HIDDEN * h + ACTIVATION_BYTES_PER_INTERMEDIATE * inner
    return tokens * per_token * dtype_bytes / 2


def sampler_peak_bytes(arch: Architecture, rows: int, tokens: int, dtype_bytes: int, model_runner_v2: bool) -> float:
    per_logit = SAMPLER_BYTES_PER_LOGIT_V2 if model_runner_v2 else SAMPLER_BYTES_PER_LOGIT_SORTING
    hidden_states = tokens * arch.hidden_size * dtype_bytes  # the forward's output stays alive meanwhile
    return rows * arch.vocab_size * per_logit + hidden_states


@dataclass(frozen=True)
class ProfileTerms:
    activation_bytes: int
    cudagraph_bytes: int
    """What vLLM subtracts for CUDA graphs (0 where the release doesn't)."""
    cudagraph_capture_bytes: int
    """What the capture itself is expected to take after the KV cache is allocated (outside the budget when not
    subtracted)."""
    non_torch_bytes: int
    notes: tuple[str, ...] = ()


def capture_sizes(max_num_seqs: int, max_capture: int | None = None) -> list[int]:
    """vLLM's default cudagraph_capture_sizes: 1, 2, 4, then steps of 8 to 256 and 16 beyond, up to
    min(2 * max_num_seqs, 512)."""
    top = max_capture if max_capture is not None else min(2 * max_num_seqs, 512)
    sizes = [s for s in [1, 2, 4, *range(8, 256, 8), *range(256, 1025, 16)] if s <= top]
    return sizes or [1]


def cudagraph_bytes(arch: Architecture, *, max_num_seqs: int, tp: int, dtype_bytes: int) -> int:
    sizes = capture_sizes(max_num_seqs)
    full = [s for s in sizes if s <= max_num_seqs]  # FULL_AND_PIECEWISE: full graphs for pure-decode sizes
    graphs = len(sizes) + len(full)
    per_graph = graphs * arch.num_layers * CUDAGRAPH_MIB_PER_LAYER_GRAPH * MiB
    return int(per_graph + forward_peak_bytes(arch, max(sizes), tp, dtype_bytes))


def non_torch_bytes(v0_engine: bool, tp: int) -> int:
    if v0_engine:
        return int(NON_TORCH_GIB_V0 * GiB)
    return int((NON_TORCH_GIB_V1_TP if tp > 1 else NON_TORCH_GIB_V1) * GiB)


def profile_terms(
    arch: Architecture,
    *,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tp: int,
    dtype_bytes: int,
    enforce_eager: bool,
    v0_engine: bool,
    model_runner_v2: bool,
    cudagraph_subtracted: bool,
    ep: bool = False,
) -> ProfileTerms:
    notes = []
    rows = min(max_num_seqs, max_num_batched_tokens)
    forward = forward_peak_bytes(arch, max_num_batched_tokens, tp, dtype_bytes, ep)
    sampler = sampler_peak_bytes(arch, rows, max_num_batched_tokens, dtype_bytes, model_runner_v2)
    if sampler > forward:
        notes.append("the sampler (top-k/top-p over the full vocabulary) sets the activation peak")
    activation = ACTIVATION_BASE_GIB * GiB + max(forward, sampler)
    if model_runner_v2 and not enforce_eager:
        floor = COMPILED_V2_PEAK_FLOOR_GIB * GiB
        if activation < floor:
            notes.append("compiled profile run (Model Runner V2) peaks at ~1 GiB whatever the batch")
            activation = floor
    capture = 0 if enforce_eager else cudagraph_bytes(arch, max_num_seqs=max_num_seqs, tp=tp, dtype_bytes=dtype_bytes)
    subtracted = capture if cudagraph_subtracted else 0
    if arch.is_moe:
        notes.append("MoE activation peak approximated (fused-MoE buffers and quantized kernels vary)")
    return ProfileTerms(int(activation), int(subtracted), int(capture), non_torch_bytes(v0_engine, tp), tuple(notes))
