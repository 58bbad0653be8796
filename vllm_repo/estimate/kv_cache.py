"""KV cache bytes per token and the block arithmetic vLLM does with them (vllm/v1/kv_cache_interface.py and
vllm/v1/core/kv_cache_utils.py).

Per layer and rank: full and sliding-window attention store K and V for max(1, kv_heads // tp) heads; MLA stores
one latent vector (kv_lora_rank + rope dims) that is not split across ranks; layers that reuse another layer's
cache store nothing; mamba/linear-attention layers keep a fixed state per request instead of per token.
Layers of different kinds are grouped so that every group has the same number of layers and every block the same
page size; the pool is one set of tensors shared by the groups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from vllm_repo.errors import UsageError
from vllm_repo.estimate.architecture import FULL, LINEAR, MAMBA, NO_KV, SLIDING, Architecture

KV_DTYPE_BYTES = {
    "auto": None,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "float32": 4,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "fp8_ds_mla": 1,
    "int8": 1,
}
FP8_DS_MLA_BYTES_PER_TOKEN = 656  # DeepSeek's packed fp8 MLA layout: 512 fp8 + 4 scales + 64 bf16 rope dims


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kv_dtype_bytes(kv_cache_dtype: str | None, model_dtype_bytes: int) -> int:
    name = (kv_cache_dtype or "auto").lower()
    if name not in KV_DTYPE_BYTES:
        raise UsageError(f"kv_cache_dtype '{kv_cache_dtype}' is not one of {', '.join(KV_DTYPE_BYTES)}")
    return KV_DTYPE_BYTES[name] or model_dtype_bytes


@dataclass(frozen=True)
class LayerKV:
    kind: str
    bytes_per_token: int
    """Per rank; 0 for mamba/linear layers, whose state is per request."""
    state_bytes: int = 0
    """Per-request state of a mamba/linear layer (per rank)."""
    window: int | None = None


def layer_specs(
    arch: Architecture, *, tp: int = 1, kv_bytes: int = 2, kv_cache_dtype: str | None = None
) -> list[LayerKV]:
    specs: list[LayerKV] = []
    kv_heads = max(1, arch.num_kv_heads // tp)
    for kind in arch.layer_types:
        if kind == NO_KV:
            specs.append(LayerKV(NO_KV, 0))
        elif kind in (MAMBA, LINEAR):
            specs.append(LayerKV(kind, 0, state_bytes=_state_bytes(arch, tp, kind)))
        elif arch.is_mla:
            if (kv_cache_dtype or "").lower() == "fp8_ds_mla":
                specs.append(LayerKV(FULL, FP8_DS_MLA_BYTES_PER_TOKEN))
            else:
                specs.append(LayerKV(FULL, (arch.kv_lora_rank + arch.qk_rope_head_dim) * kv_bytes))
        else:
            per_token = 2 * kv_heads * arch.head_dim * kv_bytes
            window = arch.sliding_window if kind == SLIDING else None
            specs.append(LayerKV(SLIDING if window else FULL, per_token, window=window))
    return specs


def _state_bytes(arch: Architecture, tp: int, kind: str) -> int:
    """Mamba2 / gated-delta-net state per request: conv state + SSM state (model dtype, 2 bytes)."""
    cfg = arch.config
    h = arch.hidden_size
    if kind == LINEAR:  # Qwen3-Next style gated delta net
        k_heads: int = cfg.get("linear_num_key_heads", 16)
        v_heads: int = cfg.get("linear_num_value_heads", 32)
        k_dim: int = cfg.get("linear_key_head_dim", 128)
        v_dim: int = cfg.get("linear_value_head_dim", 128)
        conv_k: int = cfg.get("linear_conv_kernel_dim", 4)
        conv = (conv_k - 1) * (2 * k_heads * k_dim + v_heads * v_dim) // tp
        ssm = v_heads * k_dim * v_dim // tp
        return (conv + ssm) * 2
    expand = cfg.get("mamba_expand") or cfg.get("expand") or 2
    d_state = cfg.get("mamba_d_state") or cfg.get("ssm_state_size") or cfg.get("state_size") or 128
    n_groups = cfg.get("mamba_n_groups") or cfg.get("n_groups") or 1
    conv_k = cfg.get("mamba_d_conv") or cfg.get("conv_kernel") or 4
    inner = int(expand * h)
    n_heads = cfg.get("mamba_n_heads") or cfg.get("mamba_num_heads") or max(inner // 64, 1)
    head_dim = cfg.get("mamba_d_head") or cfg.get("mamba_head_dim") or inner // n_heads
    conv = (conv_k - 1) * (inner + 2 * n_groups * d_state) // tp
    ssm = n_heads * head_dim * d_state // tp
    return (conv + ssm) * 2


@dataclass
class KVLayout:
    """The pool layout: how many bytes a block costs, how many blocks one request needs at max_model_len."""

    block_size: int
    bytes_per_block: int
    """Bytes of one block id across every layer it covers (what the pool is divided by)."""
    blocks_per_request: int
    needed_bytes_one_request: int
    """What vLLM's start-up check needs for one request at max_model_len."""
    bytes_per_token: int
    """Per rank, summed over the layers that store per-token KV."""
    approximate: bool = False
    notes: list[str] = field(default_factory=list)

    def num_blocks(self, available_bytes: int) -> int:
        return max(0, available_bytes // self.bytes_per_block) if self.bytes_per_block else 0


def layout(
    specs: list[LayerKV],
    *,
    max_model_len: int,
    max_num_batched_tokens: int,
    block_size: int = 16,
    in_flight_factor: int = 1,
) -> KVLayout:
    stored = [s for s in specs if s.kind != NO_KV]
    per_token = sum(s.bytes_per_token for s in stored)
    if not stored:
        return KVLayout(block_size, 0, 0, 0, 0, notes=["the model keeps no KV cache"])
    in_flight = in_flight_factor * max_num_batched_tokens
    notes: list[str] = []
    approximate = False

    has_state = any(s.kind in (MAMBA, LINEAR) for s in stored)
    if has_state:
        # Hybrid with mamba: the attention block grows until its page is at least the mamba state page.
        attn = [s for s in stored if s.kind not in (MAMBA, LINEAR)]
        state = max(s.state_bytes for s in stored if s.kind in (MAMBA, LINEAR))
        unit = max((s.bytes_per_token for s in attn), default=0)
        if unit:
            block_size = max(block_size, cdiv(cdiv(state, unit), 16) * 16)
        approximate = True
        notes.append(
            "hybrid mamba/linear-attention layout approximated (page alignment as in vLLM's _align_hybrid_block_size)"
        )

    def block_need(s: LayerKV) -> int:
        if s.kind in (MAMBA, LINEAR):
            return 1
        if s.kind == SLIDING and s.window:
            return cdiv(min(s.window - 1 + in_flight, max_model_len), block_size) + 1
        return cdiv(max_model_len, block_size)

    kinds: dict[tuple[str, int, int | None], list[LayerKV]] = {}
    for s in stored:
        key = (s.kind, s.bytes_per_token, s.window)
        kinds.setdefault(key, []).append(s)

    if len(kinds) == 1 or all(k[0] == FULL for k in kinds):
        # One group (UniformTypeKVCacheSpecs when head sizes differ): a block spans every layer.
        page = block_size * per_token if not has_state else block_size * max(s.bytes_per_token for s in stored)
        bytes_per_block = page if has_state else block_size * per_token
        needed = sum(block_need(s) * block_size * s.bytes_per_token for s in stored)
        return KVLayout(
            block_size, bytes_per_block, cdiv(max_model_len, block_size), needed, per_token, approximate, notes
        )

    # Several kinds with one page size: groups of `group_size` layers, a block id covers one layer per group slot.
    counts = [len(v) for v in kinds.values()]
    group_size = min(counts)
    if max(counts) < 1.5 * min(counts):
        group_size = max(counts)
    page = (
        block_size * max(s.bytes_per_token for s in stored if s.kind not in (MAMBA, LINEAR))
        if any(s.kind not in (MAMBA, LINEAR) for s in stored)
        else max(s.state_bytes for s in stored)
    )
    if has_state:
        page = max(page, max(s.state_bytes for s in stored))
    bytes_per_block = page * group_size
    blocks = 0
    needed = 0
    for layers in kinds.values():
        n_groups = cdiv(len(layers), group_size)
        need = block_need(layers[0])
        blocks += n_groups * need
        needed += len(layers) * need * page
    if len({s.bytes_per_token for s in stored if s.bytes_per_token}) > 1:
        approximate = True
        notes.append("layers of different KV sizes share one page size (padding approximated)")
    return KVLayout(block_size, bytes_per_block, blocks, needed, per_token, approximate, notes)


def max_concurrency(layout_: KVLayout, num_blocks: int) -> float:
    return num_blocks / layout_.blocks_per_request if layout_.blocks_per_request else math.inf


def kv_tokens(layout_: KVLayout, num_blocks: int, max_model_len: int) -> int:
    """What vLLM logs as 'GPU KV cache size: N tokens' (max concurrency x max_model_len)."""
    if not layout_.blocks_per_request:
        return 0
    return int(num_blocks / layout_.blocks_per_request * max_model_len)
