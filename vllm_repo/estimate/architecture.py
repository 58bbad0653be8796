"""The shape of a decoder model, read from its Hugging Face config.json, and its parameter count by part.

Only what the memory estimate needs: attention geometry per layer (full, sliding window, MLA, linear/mamba), the
MLP or mixture-of-experts widths, and the vocabulary. Config key names differ between model families; each
property below lists the spellings vLLM itself accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, overload

from vllm_repo.errors import UsageError
from vllm_repo.hf import text_config

FULL = "full_attention"
SLIDING = "sliding_attention"
MAMBA = "mamba"
LINEAR = "linear_attention"
NO_KV = "no_kv"  # cross-layer KV sharing: the layer reads another layer's cache


class ArchitectureError(UsageError):
    """A config.json the estimator can't model (its shape, not its numbers)."""


@overload
def _int(cfg: dict[str, Any], *keys: str, default: int) -> int: ...
@overload
def _int(cfg: dict[str, Any], *keys: str, default: None = None) -> int | None: ...
def _int(cfg: dict[str, Any], *keys: str, default: int | None = None) -> int | None:
    for key in keys:
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return default


@dataclass
class Architecture:
    config: dict[str, Any]
    """The language model's config (text_config for multimodal models)."""
    full_config: dict[str, Any] = field(default_factory=dict)

    # --- basics -----------------------------------------------------------------------------------------------
    @property
    def model_type(self) -> str:
        return str(self.config.get("model_type") or self.full_config.get("model_type") or "")

    @property
    def architectures(self) -> list[str]:
        return list(self.full_config.get("architectures") or self.config.get("architectures") or [])

    @property
    def hidden_size(self) -> int:
        value = _int(self.config, "hidden_size", "d_model", "n_embd", "dim")
        if value is None:
            raise ArchitectureError("config.json has no hidden_size")
        return value

    @property
    def num_layers(self) -> int:
        value = _int(self.config, "num_hidden_layers", "n_layer", "num_layers", "n_layers")
        if value is None:
            raise ArchitectureError("config.json has no num_hidden_layers")
        return value

    @property
    def num_heads(self) -> int:
        value = _int(self.config, "num_attention_heads", "n_head", "num_heads", "n_heads")
        if value is None:
            raise ArchitectureError("config.json has no num_attention_heads")
        return value

    @property
    def num_kv_heads(self) -> int:
        if self.is_mla:
            return 1
        value = _int(self.config, "num_key_value_heads", "n_head_kv", "num_kv_heads", "multi_query_group_num")
        if value is None and self.config.get("multi_query"):
            return 1
        return value or self.num_heads

    @property
    def head_dim(self) -> int:
        value = _int(self.config, "head_dim", "attention_head_dim", "kv_channels")
        return value or self.hidden_size // self.num_heads

    @property
    def vocab_size(self) -> int:
        return _int(self.config, "vocab_size", "padded_vocab_size", default=32000) or 32000

    @property
    def tied_embeddings(self) -> bool:
        value = self.config.get("tie_word_embeddings", self.full_config.get("tie_word_embeddings"))
        return bool(value) if value is not None else False

    @property
    def max_position_embeddings(self) -> int | None:
        return _int(self.config, "max_position_embeddings", "n_positions", "max_seq_len", "seq_length")

    @property
    def attention_bias(self) -> bool:
        if self.model_type in ("qwen2", "qwen2_vl", "qwen2_5_vl"):
            return True
        return bool(self.config.get("attention_bias") or self.config.get("qkv_bias"))

    @property
    def torch_dtype(self) -> str | None:
        value = self.config.get("torch_dtype") or self.config.get("dtype") or self.full_config.get("torch_dtype")
        return str(value) if value else None

    def check_decoder_shape(self) -> None:
        """Raises ArchitectureError unless the config describes a decoder the estimate can size."""
        if min(self.hidden_size, self.num_layers, self.num_heads) <= 0:
            raise ArchitectureError("config.json describes no decoder layers")

    # --- MLP / MoE ------------------------------------------------------------------------------------------
    @property
    def intermediate_size(self) -> int:
        value = _int(self.config, "intermediate_size", "ffn_dim", "n_inner", "ffn_hidden_size")
        return value or 4 * self.hidden_size

    @property
    def num_experts(self) -> int:
        return (
            _int(self.config, "num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", default=0) or 0
        )

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def experts_per_token(self) -> int:
        return (
            _int(
                self.config,
                "num_experts_per_tok",
                "moe_topk",
                "top_k",
                "num_selected_experts",
                "experts_per_token",
                default=2,
            )
            or 2
        )

    @property
    def moe_intermediate_size(self) -> int:
        return (
            _int(self.config, "moe_intermediate_size", "expert_intermediate_size", default=self.intermediate_size)
            or self.intermediate_size
        )

    @property
    def shared_expert_intermediate_size(self) -> int:
        shared = _int(self.config, "shared_expert_intermediate_size")
        if shared:
            return shared
        n_shared = _int(self.config, "n_shared_experts", "num_shared_experts", default=0) or 0
        return n_shared * self.moe_intermediate_size

    def is_moe_layer(self, index: int) -> bool:
        if not self.is_moe:
            return False
        first_dense = _int(self.config, "first_k_dense_replace", default=0) or 0
        if index < first_dense:
            return False
        mlp_only = self.config.get("mlp_only_layers") or []
        if index in mlp_only:
            return False
        step = _int(self.config, "decoder_sparse_step", "moe_layer_freq", default=1) or 1
        return (index + 1) % step == 0 if step > 1 else True

    # --- attention kinds -------------------------------------------------------------------------------------
    @property
    def is_mla(self) -> bool:
        return bool(_int(self.config, "kv_lora_rank"))

    @property
    def kv_lora_rank(self) -> int:
        return _int(self.config, "kv_lora_rank", default=0) or 0

    @property
    def qk_rope_head_dim(self) -> int:
        return _int(self.config, "qk_rope_head_dim", default=64) or 64

    @property
    def sliding_window(self) -> int | None:
        if self.model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and not self.config.get(
            "use_sliding_window"
        ):
            return None
        value = self.config.get("sliding_window")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        return None

    @property
    def layer_types(self) -> list[str]:
        """One entry per decoder layer: FULL, SLIDING, MAMBA, LINEAR or NO_KV."""
        n = self.num_layers
        raw = self.config.get("layer_types")
        if isinstance(raw, list) and len(raw) == n:
            kinds = [_normalise_layer_type(str(t)) for t in raw]
        elif isinstance(self.config.get("layers_block_type"), list):
            kinds = [_normalise_layer_type(str(t)) for t in self.config["layers_block_type"]][:n]
        elif isinstance(self.config.get("hybrid_override_pattern"), str):
            # Nemotron-H: M = mamba, * = attention, - = MLP only
            kinds = [{"M": MAMBA, "*": FULL}.get(c, NO_KV) for c in self.config["hybrid_override_pattern"]][:n]
        elif _int(self.config, "attn_layer_period") and _int(self.config, "attn_layer_offset") is not None:
            period, offset = self.config["attn_layer_period"], self.config["attn_layer_offset"]
            kinds = [FULL if i % period == offset else MAMBA for i in range(n)]
        elif self.sliding_window and _int(self.config, "sliding_window_pattern"):
            # Gemma 2/3 style: every Nth layer is global.
            pattern = self.config["sliding_window_pattern"]
            kinds = [FULL if (i + 1) % pattern == 0 else SLIDING for i in range(n)]
        elif self.sliding_window and self.model_type in ("gemma2",):
            kinds = [SLIDING if i % 2 == 0 else FULL for i in range(n)]
        elif self.sliding_window and self.model_type not in ("qwen2", "qwen3"):
            kinds = [SLIDING] * n
        else:
            kinds = [FULL] * n
        shared = _int(self.config, "num_kv_shared_layers", default=0) or 0
        if shared:
            kinds = kinds[: n - shared] + [NO_KV] * shared
        return kinds

    @property
    def is_hybrid(self) -> bool:
        return any(k in (MAMBA, LINEAR) for k in self.layer_types)


def _normalise_layer_type(name: str) -> str:
    n = name.lower()
    if "sliding" in n or n in ("local", "local_attention", "chunked_attention"):
        return SLIDING
    if "mamba" in n or n in ("m", "ssm"):
        return MAMBA
    if "linear" in n:
        return LINEAR
    if "attention" in n or n in ("full", "global", "attn", "*"):
        return FULL
    return NO_KV


def from_config(config: dict[str, Any]) -> Architecture:
    return Architecture(config=text_config(config), full_config=config)


@dataclass(frozen=True)
class ParameterCounts:
    """Parameters by part; the parts matter because tensor parallelism shards them differently."""

    embedding: int
    lm_head: int
    attention: int
    kv_projection: int
    """k/v projections (part of attention): replicated across ranks when tp exceeds the KV heads."""
    mlp: int
    experts: int
    norms: int
    vision: int = 0
    """Vision/audio encoder and projector of a multimodal model."""

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.attention + self.mlp + self.experts + self.norms + self.vision


def parameter_counts(arch: Architecture) -> ParameterCounts:
    """Parameters derived from the architecture, for when no weights metadata is at hand."""
    h, n_layers, vocab = arch.hidden_size, arch.num_layers, arch.vocab_size
    heads, kv_heads, hd = arch.num_heads, arch.num_kv_heads, arch.head_dim
    attention = kv = mlp = experts = 0
    norms = h  # final norm
    types = arch.layer_types
    for i in range(n_layers):
        kind = types[i] if i < len(types) else FULL
        norms += 2 * h
        if kind in (MAMBA, LINEAR):
            inner = _int(arch.config, "mamba_expand", "expand", default=2) * h
            d_state = _int(arch.config, "mamba_d_state", "ssm_state_size", "state_size", default=128)
            attention += h * (2 * inner + 2 * d_state) + inner * h + inner * 4
        elif arch.is_mla:
            q_lora = _int(arch.config, "q_lora_rank", default=0) or 0
            nope = _int(arch.config, "qk_nope_head_dim", default=128) or 128
            rope = arch.qk_rope_head_dim
            v_dim = _int(arch.config, "v_head_dim", default=128) or 128
            q = (h * q_lora + q_lora * heads * (nope + rope)) if q_lora else h * heads * (nope + rope)
            kv_a = h * (arch.kv_lora_rank + rope)
            kv_b = arch.kv_lora_rank * heads * (nope + v_dim)
            attention += q + kv_a + kv_b + heads * v_dim * h
            kv += kv_a
        else:
            q_out = heads * hd
            kv_out = 2 * kv_heads * hd
            bias = (q_out + kv_out) if arch.attention_bias else 0
            attention += h * q_out + h * kv_out + q_out * h + bias
            kv += h * kv_out
        if arch.is_moe_layer(i):
            experts += arch.num_experts * 3 * h * arch.moe_intermediate_size + h * arch.num_experts
            mlp += 3 * h * arch.shared_expert_intermediate_size
        else:
            mlp += 3 * h * arch.intermediate_size
    embedding = vocab * h
    lm_head = 0 if arch.tied_embeddings else vocab * h
    return ParameterCounts(embedding, lm_head, attention, kv, mlp, experts, norms, encoder_parameters(arch))


def encoder_parameters(arch: Architecture) -> int:
    """A ViT-style vision encoder (CLIP, SigLIP, Qwen2-VL) plus a two-layer projector into the language model."""
    vc = arch.full_config.get("vision_config")
    if not isinstance(vc, dict):
        return 0
    width = _int(vc, "embed_dim", "width") or _int(vc, "hidden_size") or 0
    depth = _int(vc, "depth", "num_hidden_layers", "num_layers") or 0
    if not width or not depth:
        return 0
    inner = _int(vc, "intermediate_size") or int(float(vc.get("mlp_ratio", 4)) * width)
    patch = _int(vc, "patch_size", default=14) or 14
    per_layer = 4 * width * width + 2 * width * inner + 9 * width + inner
    patch_embed = 3 * patch * patch * width * (_int(vc, "temporal_patch_size", default=1) or 1)
    merge = _int(vc, "spatial_merge_size", default=1) or 1
    projector_in = width * merge * merge
    projector = (
        projector_in * projector_in + projector_in * arch.hidden_size
        if merge > 1
        else width * arch.hidden_size + arch.hidden_size * arch.hidden_size
    )
    return depth * per_layer + patch_embed + projector
