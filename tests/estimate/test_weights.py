"""Weight bytes from real safetensors headers, the architecture fallback, and the per-rank split."""

from __future__ import annotations

import json
import struct

import pytest

from tests.support.estimate_models import config, llama_tensors, model_dir, write_safetensors
from vllm_repo.estimate.architecture import from_config, parameter_counts
from vllm_repo.estimate.model_facts import ModelFactsError, load_model_facts, read_safetensors_header
from vllm_repo.estimate.weights import rotary_cache_bytes, weights_per_rank


def test_header_read_without_reading_tensors(tmp_path, tiny_llama):
    size = write_safetensors(tmp_path / "model.safetensors", llama_tensors(tiny_llama))
    header = read_safetensors_header(tmp_path / "model.safetensors")
    assert header["model.embed_tokens.weight"]["shape"] == [1024, 256]
    d = model_dir(tmp_path, tiny_llama)
    facts = load_model_facts(str(d), offline=True)
    assert facts.weights.source == "safetensors headers"
    assert facts.weights.total_bytes == size


def test_sharded_checkpoint_read_through_the_index(tmp_path, tiny_llama):
    d = tmp_path / "sharded"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(tiny_llama))
    tensors = list(llama_tensors(tiny_llama).items())
    half = len(tensors) // 2
    a = write_safetensors(d / "model-00001-of-00002.safetensors", dict(tensors[:half]))
    b = write_safetensors(d / "model-00002-of-00002.safetensors", dict(tensors[half:]))
    weight_map = {n: "model-00001-of-00002.safetensors" for n, _ in tensors[:half]}
    weight_map |= {n: "model-00002-of-00002.safetensors" for n, _ in tensors[half:]}
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": a + b}, "weight_map": weight_map})
    )
    # a stray consolidated file (Mistral repos ship one) must not be counted twice
    write_safetensors(d / "consolidated.safetensors", dict(tensors))
    assert load_model_facts(str(d), offline=True).weights.total_bytes == a + b


def test_partial_download_falls_back_to_the_index_total(tmp_path, tiny_llama):
    d = tmp_path / "partial"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(tiny_llama))
    tensors = list(llama_tensors(tiny_llama).items())
    write_safetensors(d / "model-00001-of-00002.safetensors", dict(tensors[:3]))
    weight_map = {n: f"model-0000{1 + (i >= 3)}-of-00002.safetensors" for i, (n, _) in enumerate(tensors)}
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 987654}, "weight_map": weight_map})
    )
    weights = load_model_facts(str(d), offline=True).weights
    assert (weights.source, weights.total_bytes) == ("index total_size", 987654)


def test_index_total_without_shards(tmp_path, tiny_llama):
    d = model_dir(tmp_path, tiny_llama, weights=False)
    (d / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 123456789}, "weight_map": {"x": "model-1.safetensors"}})
    )
    facts = load_model_facts(str(d), offline=True)
    assert facts.weights.source == "index total_size" and facts.weights.total_bytes == 123456789
    est = weights_per_rank(facts)
    assert est.approximate
    assert est.bytes_per_rank == pytest.approx(123456789 + rotary_cache_bytes(facts.arch, 2), rel=1e-6)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen2.5-7b", "qwen2.5-1.5b"])
def test_architecture_count_matches_the_checkpoint_tensors(tmp_path, name):
    """The offline fallback counts exactly the parameters a real HF checkpoint of the config holds."""
    cfg = config(name)
    elements = 0
    for _, shape in llama_tensors(cfg).values():
        n = 1
        for dim in shape:
            n *= dim
        elements += n
    assert parameter_counts(from_config(cfg)).total == elements


def test_llama_8b_weights_match_vllm_model_loading():
    # vLLM logged "Loading model weights took 14.9888 GB" for Llama-3.1-8B-Instruct
    facts_cfg = config("llama-3.1-8b")
    from vllm_repo.estimate.model_facts import ModelFacts

    facts = ModelFacts("llama", facts_cfg, "test", None, from_config(facts_cfg))
    assert weights_per_rank(facts).bytes_per_rank / 2**30 == pytest.approx(14.9888, abs=0.01)


def test_tensor_parallel_split_keeps_norms_whole_and_replicates_kv(tmp_path):
    cfg = dict(config("qwen2.5-7b"), num_hidden_layers=2, vocab_size=4096)
    d = model_dir(tmp_path, cfg)
    facts = load_model_facts(str(d), offline=True)
    rotary = rotary_cache_bytes(facts.arch, 2)
    total = facts.weights.total_bytes
    tensors = {t.name: t.nbytes for t in facts.weights.tensors}
    norms = sum(v for k, v in tensors.items() if "norm" in k)
    kv = sum(v for k, v in tensors.items() if ".k_proj." in k or ".v_proj." in k)
    tp2 = weights_per_rank(facts, tp=2).bytes_per_rank - rotary
    assert tp2 == (total - norms) // 2 + norms
    # 4 KV heads at TP 8: every rank keeps a whole head (a quarter of k/v), not an eighth
    tp8 = weights_per_rank(facts, tp=8).bytes_per_rank - rotary
    assert tp8 == pytest.approx((total - norms - kv) / 8 + norms + kv / 4, abs=2)


def test_pipeline_parallel_takes_the_busiest_stage(tmp_path, tiny_llama):
    d = model_dir(tmp_path, tiny_llama)
    facts = load_model_facts(str(d), offline=True)
    one = weights_per_rank(facts).bytes_per_rank
    two = weights_per_rank(facts, pp=2).bytes_per_rank
    assert one / 2 < two < one


def test_float32_checkpoint_served_in_16_bit(tmp_path, tiny_llama):
    d32 = model_dir(tmp_path, tiny_llama, dtype="F32", name="f32")
    d16 = model_dir(tmp_path, tiny_llama, dtype="BF16", name="bf16")
    w32 = weights_per_rank(load_model_facts(str(d32), offline=True))
    w16 = weights_per_rank(load_model_facts(str(d16), offline=True))
    assert w32.bytes_per_rank == w16.bytes_per_rank
    assert weights_per_rank(load_model_facts(str(d32), offline=True), dtype="float32").bytes_per_rank > 1.9 * (
        w16.bytes_per_rank - rotary_cache_bytes(from_config(tiny_llama), 2)
    )


def test_online_fp8_halves_linear_layers_only(tmp_path, tiny_llama):
    facts = load_model_facts(str(model_dir(tmp_path, tiny_llama)), offline=True)
    rotary = rotary_cache_bytes(facts.arch, 2)
    full = weights_per_rank(facts).bytes_per_rank - rotary
    fp8 = weights_per_rank(facts, quantization="fp8").bytes_per_rank - rotary
    kept = 2 * 1024 * 256 * 2 + sum(t.nbytes for t in facts.weights.tensors if "norm" in t.name)
    assert fp8 == kept + (full - kept) // 2


def test_quantized_checkpoint_estimated_from_bits():
    # GPTQ int4, group 128: ~0.52 bytes per linear weight; embeddings stay 16-bit.
    cfg = dict(config("qwen2.5-7b"), quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 128})
    from vllm_repo.estimate.model_facts import ModelFacts

    quant = weights_per_rank(ModelFacts("q", cfg, "t", None, from_config(cfg))).bytes_per_rank / 2**30
    plain = (
        weights_per_rank(
            ModelFacts("p", config("qwen2.5-7b"), "t", None, from_config(config("qwen2.5-7b")))
        ).bytes_per_rank
        / 2**30
    )
    assert 5.0 < quant < 5.5 < 14 < plain  # vLLM logged 5.29 GiB for Qwen2.5-7B-Instruct-AWQ


def test_truncated_or_garbage_safetensors_is_a_clear_error(tmp_path, tiny_llama):
    d = model_dir(tmp_path, tiny_llama, weights=False)
    (d / "model.safetensors").write_bytes(struct.pack("<Q", 10**9) + b"{}")
    with pytest.raises(ModelFactsError, match="header length"):
        load_model_facts(str(d), offline=True)
    (d / "model.safetensors").write_bytes(struct.pack("<Q", 4) + b"nope")
    with pytest.raises(ModelFactsError, match="not valid JSON"):
        load_model_facts(str(d), offline=True)
