"""Weight bytes on the busiest GPU rank.

vLLM shards almost every weight across tensor-parallel ranks (vocabulary-parallel embeddings and lm_head, column
and row parallel projections, experts by TP or EP); norms stay whole on every rank, and so do the k/v projections
of the KV heads a rank shares when tensor_parallel_size exceeds the KV heads. Pipeline stages take a contiguous
slice of the layers, the first one the embedding and the last one the lm_head.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vllm_repo.errors import UsageError
from vllm_repo.estimate.architecture import Architecture, ParameterCounts, parameter_counts
from vllm_repo.estimate.model_facts import ModelFacts, TensorEntry

DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}
SAFETENSORS_FLOAT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}

_LAYER_INDEX = re.compile(r"(?:layers|h|blocks|layer)\.(\d+)\.")
_EMBED = re.compile(r"(embed_tokens|\.wte\.|word_embeddings|tok_embeddings|embedding\.weight$)")
_LM_HEAD = re.compile(r"(^|\.)(lm_head|embed_out|output)\.")
_KV = re.compile(r"\.(k_proj|v_proj|kv_a_proj_with_mqa)\.")
_NORM = re.compile(r"(norm|ln_\d|ln_f|layernorm)", re.IGNORECASE)
_VISION = re.compile(r"(vision|visual|image_newline|multi_modal_projector|mm_projector|audio_tower)")


@dataclass(frozen=True)
class WeightEstimate:
    bytes_per_rank: int
    total_bytes: int
    source: str
    approximate: bool
    note: str = ""


def model_dtype_bytes(arch: Architecture, dtype: str | None) -> int:
    """Bytes per element of the dtype vLLM computes in ('auto' takes the checkpoint's, float32 becoming bf16)."""
    if dtype and dtype != "auto":
        if dtype not in DTYPE_BYTES:
            raise UsageError(f"dtype '{dtype}' is not one of auto, {', '.join(sorted(DTYPE_BYTES))}")
        return DTYPE_BYTES[dtype]
    # vLLM serves float32 checkpoints in 16-bit unless float32 is asked for explicitly.
    return 2


def rotary_cache_bytes(arch: Architecture, dtype_bytes: int) -> int:
    """vLLM keeps one cos/sin table of max_position x rotary_dim in the model dtype."""
    max_pos = arch.max_position_embeddings or 0
    rotary_dim = (
        arch.qk_rope_head_dim
        if arch.is_mla
        else int(arch.head_dim * float(arch.config.get("partial_rotary_factor", 1.0) or 1.0))
    )
    return max_pos * rotary_dim * dtype_bytes


def _quant_bits(facts: ModelFacts) -> tuple[str | None, float | None]:
    q = facts.quantization_config
    if not q:
        return None, None
    method = str(q.get("quant_method") or q.get("format") or "").lower()
    bits = q.get("bits") or q.get("w_bit") or q.get("weight_bits")
    if not bits and isinstance(q.get("config_groups"), dict):
        for group in q["config_groups"].values():
            w = (group or {}).get("weights") or {}
            bits = w.get("num_bits") or bits
    if method in ("fp8", "fbgemm_fp8", "modelopt") and not bits:
        bits = 8
    if method == "mxfp4":
        bits = 4.25
    return method or None, float(bits) if bits else None


def _per_rank_share(name: str, arch: Architecture, tp: int) -> float:
    """Fraction of a checkpoint tensor that one tensor-parallel rank holds."""
    if _NORM.search(name) or "kv_a_proj_with_mqa" in name:
        return 1.0  # norms, and MLA's latent projection, are whole on every rank
    if _KV.search(name) and arch.num_kv_heads < tp:
        return 1.0 / arch.num_kv_heads
    return 1.0 / tp


def _stage_of(name: str, arch: Architecture, pp: int) -> int | None:
    """Pipeline stage a tensor lives on; None for the embedding/lm_head handled by the caller."""
    m = _LAYER_INDEX.search(name)
    if not m:
        return None
    return min(int(m.group(1)) * pp // max(arch.num_layers, 1), pp - 1)


def _loaded_bytes(
    t: TensorEntry, target_bytes: int, online_fp8: bool, is_linear: bool, quantized_checkpoint: bool
) -> int:
    """Bytes a checkpoint tensor takes once loaded: quantized checkpoints load as stored; float tensors of an
    unquantized one are cast to the serving dtype, linear weights to one byte under online fp8."""
    src = SAFETENSORS_FLOAT_BYTES.get(t.dtype.upper())
    if src is None or quantized_checkpoint:
        return t.nbytes
    elements = t.nbytes // src
    if online_fp8 and is_linear:
        return elements  # the per-tensor scales are negligible
    return elements * target_bytes


def weights_per_rank(
    facts: ModelFacts, *, tp: int = 1, pp: int = 1, dtype: str | None = None, quantization: str | None = None
) -> WeightEstimate:
    arch = facts.arch
    dtype_bytes = model_dtype_bytes(arch, dtype)
    method, bits = _quant_bits(facts)
    quantized_checkpoint = method is not None
    online_fp8 = (quantization or "").lower() == "fp8" and not quantized_checkpoint
    extra = rotary_cache_bytes(arch, dtype_bytes)
    weights = facts.weights

    if weights is not None and weights.tensors:
        stages = [0.0] * pp
        total = 0
        for t in weights.tensors:
            linear = (
                t.name.endswith("weight")
                and not _NORM.search(t.name)
                and not _EMBED.search(t.name)
                and not _LM_HEAD.search(t.name)
                and not _VISION.search(t.name)
            )
            nbytes = _loaded_bytes(t, dtype_bytes, online_fp8, linear, quantized_checkpoint)
            total += nbytes
            share = nbytes * _per_rank_share(t.name, arch, tp)
            if _LM_HEAD.search(t.name):
                stages[-1] += share
                continue
            stage = _stage_of(t.name, arch, pp)
            stages[0 if stage is None else stage] += share
        if arch.tied_embeddings and pp > 1:
            # The last stage needs its own copy of the tied embedding for the lm_head.
            embed = sum(t.nbytes for t in weights.tensors if _EMBED.search(t.name))
            stages[-1] += embed / tp
        return WeightEstimate(int(max(stages)) + extra, total, weights.source, approximate=False)

    counts = parameter_counts(arch)
    per_param = _bytes_per_linear_param(method, bits, dtype_bytes, online_fp8)
    total_est, rank_est = _from_counts(counts, arch, tp, pp, dtype_bytes, per_param, method)
    if weights is not None:  # only the index total: trust it, keep the per-rank split of the estimate
        scale = weights.total_bytes / max(total_est, 1)
        if online_fp8:
            scale = 1.0
        return WeightEstimate(
            int(rank_est * scale) + extra,
            weights.total_bytes,
            weights.source,
            approximate=True,
            note="per-rank split estimated from the architecture",
        )
    return WeightEstimate(
        int(rank_est) + extra,
        int(total_est),
        "parameter count from the architecture",
        approximate=True,
        note=f"{counts.total / 1e9:.2f}B parameters derived from config.json",
    )


def _bytes_per_linear_param(method: str | None, bits: float | None, dtype_bytes: int, online_fp8: bool) -> float:
    if online_fp8:
        return 1.0
    if method is None or bits is None:
        return float(dtype_bytes)
    if bits >= 8:
        return bits / 8
    # int4/int8 group quantization (GPTQ, AWQ, compressed-tensors): packed weights + fp16 scales and packed zeros
    # per group of 128 inputs.
    return bits / 8 + 2 / 128 + bits / 8 / 128


def _from_counts(
    counts: ParameterCounts,
    arch: Architecture,
    tp: int,
    pp: int,
    dtype_bytes: int,
    per_param: float,
    method: str | None,
) -> tuple[float, float]:
    embed = counts.embedding * dtype_bytes
    head = counts.lm_head * dtype_bytes
    norms = counts.norms * dtype_bytes
    kv = counts.kv_projection * per_param
    experts_per_param = per_param
    dense_per_param = per_param
    if method == "mxfp4":  # only the experts are MXFP4; attention and dense MLPs stay 16-bit
        dense_per_param = dtype_bytes
    attention_other = (counts.attention - counts.kv_projection) * dense_per_param
    kv = counts.kv_projection * dense_per_param
    mlp = counts.mlp * dense_per_param
    experts = counts.experts * experts_per_param
    vision = counts.vision * dtype_bytes  # encoders stay 16-bit in quantized checkpoints
    total = embed + head + norms + kv + attention_other + mlp + experts + vision
    kv_share = 1.0 / arch.num_kv_heads if arch.num_kv_heads < tp else 1.0 / tp
    layers = (attention_other + mlp + experts) / tp + kv * kv_share + norms
    first = embed / tp + vision / tp + layers / pp
    last = head / tp + layers / pp + (embed / tp if arch.tied_embeddings and pp > 1 else 0)
    rank = max(first, last) if pp > 1 else embed / tp + vision / tp + head / tp + layers
    return total, rank
