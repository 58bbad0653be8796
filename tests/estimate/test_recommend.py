"""Recommendations: each one, applied, must make vLLM start (and meet the wanted concurrency)."""

from __future__ import annotations

from tests.support.estimate_models import config
from vllm_repo.estimate import estimate_model
from vllm_repo.estimate.architecture import from_config
from vllm_repo.estimate.model_facts import ModelFacts
from vllm_repo.repository.engine_settings import EngineSettings


def facts(name: str) -> ModelFacts:
    return ModelFacts(name, config(name), "test", None, from_config(config(name)))


def by_setting(est):
    return {r.setting: r.value for r in est.recommendations}


def test_smallest_tensor_parallel_size_that_fits_and_divides_heads():
    est = estimate_model(
        "q",
        "L40S",
        vllm_version="0.26.0",
        facts=facts("qwen2.5-7b"),
        num_gpus=8,
        target_concurrency=40,
        settings=EngineSettings(max_model_len=32768),
    )
    recs = by_setting(est)
    tp = recs["tensor_parallel_size"]
    assert 28 % tp == 0
    applied = estimate_model(
        "q",
        "L40S",
        vllm_version="0.26.0",
        facts=facts("qwen2.5-7b"),
        num_gpus=8,
        settings=EngineSettings(max_model_len=32768, tensor_parallel_size=tp),
    )
    assert applied.fits and applied.max_concurrency >= 40
    smaller = estimate_model(
        "q",
        "L40S",
        vllm_version="0.26.0",
        facts=facts("qwen2.5-7b"),
        num_gpus=8,
        settings=EngineSettings(max_model_len=32768, tensor_parallel_size=tp // 2),
    )
    assert smaller.max_concurrency < 40


def test_utilization_for_the_wanted_concurrency():
    base = estimate_model(
        "l",
        "A100 80GB",
        vllm_version="0.26.0",
        facts=facts("llama-3.1-8b"),
        target_concurrency=3,
        settings=EngineSettings(max_model_len=131072, gpu_memory_utilization=0.6),
    )
    util = by_setting(base)["gpu_memory_utilization"]
    assert 0.6 < util <= 0.99
    ok = estimate_model(
        "l",
        "A100 80GB",
        vllm_version="0.26.0",
        facts=facts("llama-3.1-8b"),
        settings=EngineSettings(max_model_len=131072, gpu_memory_utilization=util),
    )
    below = estimate_model(
        "l",
        "A100 80GB",
        vllm_version="0.26.0",
        facts=facts("llama-3.1-8b"),
        settings=EngineSettings(max_model_len=131072, gpu_memory_utilization=round(util - 0.01, 2)),
    )
    assert ok.max_concurrency >= 3 > below.max_concurrency


def test_fp8_kv_and_max_model_len_when_one_request_does_not_fit():
    est = estimate_model(
        "l", "L4", vllm_version="0.26.0", facts=facts("llama-3.1-8b"), settings=EngineSettings(max_model_len=65536)
    )
    assert not est.fits
    recs = by_setting(est)
    assert recs["kv_cache_dtype"] == "fp8"
    assert estimate_model(
        "l",
        "L4",
        vllm_version="0.26.0",
        facts=facts("llama-3.1-8b"),
        settings=EngineSettings(max_model_len=65536, kv_cache_dtype="fp8"),
    ).fits
    # at 128k even fp8 does not fit: no fp8 recommendation then
    assert "kv_cache_dtype" not in by_setting(
        estimate_model(
            "l", "L4", vllm_version="0.26.0", facts=facts("llama-3.1-8b"), settings=EngineSettings(max_model_len=131072)
        )
    )
    length = recs["max_model_len"]
    assert estimate_model(
        "l", "L4", vllm_version="0.26.0", facts=facts("llama-3.1-8b"), settings=EngineSettings(max_model_len=length)
    ).fits
    assert length <= est.estimated_max_model_len


def test_no_recommendations_when_it_fits_comfortably():
    est = estimate_model(
        "q", "H200", vllm_version="0.26.0", facts=facts("qwen2.5-1.5b"), settings=EngineSettings(max_model_len=8192)
    )
    assert est.fits and est.recommendations == []


def test_graph_capture_outside_a_tight_budget_is_flagged():
    # before 0.21 CUDA graphs are captured after the KV cache: at 0.99 they no longer fit beside it
    est = estimate_model(
        "q",
        "RTX 4090",
        vllm_version="0.10.2",
        facts=facts("qwen2.5-7b"),
        settings=EngineSettings(max_model_len=4096, gpu_memory_utilization=0.97),
    )
    assert est.fits and est.cudagraph_gib == 0
    util = by_setting(est)["gpu_memory_utilization"]
    assert util < 0.97
    headroom = est.gpu_total_gib * (1 - util) - 0.5
    assert headroom >= est.cudagraph_capture_gib
    # eager mode captures nothing, so nothing to say
    assert (
        estimate_model(
            "q",
            "RTX 4090",
            vllm_version="0.10.2",
            facts=facts("qwen2.5-7b"),
            settings=EngineSettings(max_model_len=4096, gpu_memory_utilization=0.97, enforce_eager=True),
        ).recommendations
        == []
    )


def test_utilization_above_free_memory_gets_the_ceiling():
    est = estimate_model(
        "q",
        "RTX 4090",
        vllm_version="0.26.0",
        facts=facts("qwen2.5-1.5b"),
        settings=EngineSettings(max_model_len=4096, gpu_memory_utilization=0.99),
    )
    util = by_setting(est)["gpu_memory_utilization"]
    assert estimate_model(
        "q",
        "RTX 4090",
        vllm_version="0.26.0",
        facts=facts("qwen2.5-1.5b"),
        settings=EngineSettings(max_model_len=4096, gpu_memory_utilization=util),
    ).fits
