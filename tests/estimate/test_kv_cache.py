"""KV bytes per token by layer type, on real model configs, and vLLM's block arithmetic."""

from __future__ import annotations

import json

import pytest

from tests.support.estimate_models import REPO, config
from vllm_repo.errors import UsageError
from vllm_repo.estimate import kv_cache
from vllm_repo.estimate.architecture import FULL, MAMBA, SLIDING, from_config


def per_token(name: str, tp: int = 1, kv_bytes: int = 2, kv_cache_dtype: str | None = None) -> int:
    specs = kv_cache.layer_specs(from_config(config(name)), tp=tp, kv_bytes=kv_bytes, kv_cache_dtype=kv_cache_dtype)
    return sum(s.bytes_per_token for s in specs)


def test_full_attention_gqa_llama():
    # 32 layers x K and V x 8 KV heads x 128 dims x 2 bytes
    assert per_token("llama-3.1-8b") == 32 * 2 * 8 * 128 * 2 == 131072


def test_gqa_heads_split_across_tensor_parallel_ranks():
    assert per_token("llama-3.1-8b", tp=2) == per_token("llama-3.1-8b") // 2
    assert per_token("llama-3.1-8b", tp=8) == per_token("llama-3.1-8b") // 8


def test_kv_heads_replicated_when_tp_exceeds_them():
    # Qwen2.5-7B has 4 KV heads: at TP 8 each rank still holds one whole head.
    assert per_token("qwen2.5-7b") == 28 * 2 * 4 * 128 * 2
    assert per_token("qwen2.5-7b", tp=8) == per_token("qwen2.5-7b", tp=4) == 28 * 2 * 1 * 128 * 2
    # Qwen3-235B at TP 8: 94 layers x 1 head -- the figure vLLM's logs imply (48,128 bytes/token/rank)
    assert per_token("qwen3-235b-a22b", tp=8) == 48128


def test_fp8_kv_cache_halves_bytes():
    assert per_token("llama-3.1-8b", kv_bytes=1) * 2 == per_token("llama-3.1-8b")


def test_mla_stores_one_latent_not_split_by_tp():
    # DeepSeek-V2-Lite: 27 layers x (kv_lora_rank 512 + rope 64) x 2 bytes; vLLM logged 0.95 GiB for 32768 tokens
    assert per_token("deepseek-v2-lite") == 27 * 576 * 2 == 31104
    assert per_token("deepseek-v2-lite", tp=4) == per_token("deepseek-v2-lite")
    assert abs(per_token("deepseek-v2-lite") * 32768 / 2**30 - 0.95) < 0.005
    assert per_token("deepseek-v2-lite", kv_cache_dtype="fp8_ds_mla") == 27 * 656


def test_sliding_window_layers_need_fewer_blocks():
    arch = from_config(config("gpt-oss-20b"))
    assert arch.layer_types.count(SLIDING) == 12 and arch.layer_types.count(FULL) == 12
    specs = kv_cache.layer_specs(arch)
    lay = kv_cache.layout(specs, max_model_len=131072, max_num_batched_tokens=2048, in_flight_factor=2)
    full_blocks = kv_cache.cdiv(131072, 16)
    sliding_blocks = kv_cache.cdiv(128 - 1 + 2 * 2048, 16) + 1
    # two groups of 12 layers share each block id
    assert lay.blocks_per_request == full_blocks + sliding_blocks
    assert lay.bytes_per_block == 16 * 2 * 8 * 64 * 2 * 12
    uniform = kv_cache.layout(
        [kv_cache.LayerKV(FULL, s.bytes_per_token) for s in specs], max_model_len=131072, max_num_batched_tokens=2048
    )
    assert lay.needed_bytes_one_request < uniform.needed_bytes_one_request / 1.9


def test_gemma3_pattern_one_global_layer_in_six():
    kinds = from_config(config("gemma-3-27b-text")).layer_types
    assert kinds.count(FULL) == 10 and kinds.count(SLIDING) == 52
    assert kinds[5] == FULL and kinds[0] == SLIDING


def test_qwen2_sliding_window_ignored_unless_enabled():
    assert set(from_config(config("qwen2.5-7b")).layer_types) == {FULL}


def test_mamba_hybrid_state_per_request_and_flagged_approximate():
    arch = from_config(config("mamba2-hybrid"))
    assert arch.is_hybrid and arch.layer_types.count(MAMBA) == 18
    specs = kv_cache.layer_specs(arch)
    assert all(s.bytes_per_token == 0 and s.state_bytes > 0 for s in specs if s.kind == MAMBA)
    assert sum(s.bytes_per_token for s in specs) == 2 * 2 * 4 * 128 * 2
    lay = kv_cache.layout(specs, max_model_len=8192, max_num_batched_tokens=2048)
    assert lay.approximate
    # the attention block grows until its page holds a mamba state
    assert lay.block_size * 2 * 4 * 128 * 2 >= max(s.state_bytes for s in specs)


def test_tokens_and_blocks_match_vllm_on_the_h200_runs():
    """Blocks -> logged tokens, as vLLM 0.26.0 printed them (bench/data/h200_calibration.json)."""
    doc = json.loads((REPO / "bench/data/h200_calibration.json").read_text())
    for run in doc["runs"]:
        arch = from_config(doc["model_configs"][run["preset"]])
        length = run["engine_kwargs"]["max_model_len"]
        lay = kv_cache.layout(
            kv_cache.layer_specs(arch), max_model_len=length, max_num_batched_tokens=run["max_num_batched_tokens"]
        )
        assert kv_cache.kv_tokens(lay, run["num_gpu_blocks"], length) == run["kv_cache_tokens"], run["name"]
        # and the blocks are what the logged available memory buys (to its 2-decimal rounding)
        blocks = lay.num_blocks(int(run["available_kv_gib"] * 2**30))
        assert abs(blocks - run["num_gpu_blocks"]) <= 0.005 * 2**30 / lay.bytes_per_block + 1, run["name"]


@pytest.mark.parametrize("name", ["auto", "fp8", "fp8_e5m2", "bfloat16"])
def test_kv_dtype_names(name):
    assert kv_cache.kv_dtype_bytes(name, 2) in (1, 2)


def test_unknown_kv_dtype_is_a_clear_error():
    with pytest.raises(UsageError, match="kv_cache_dtype 'fp9'"):
        kv_cache.kv_dtype_bytes("fp9", 2)
