"""The per-rank budget, release-dependent defaults and vLLM's start-up errors."""

from __future__ import annotations

import json

import pytest

from tests.support.estimate_models import REPO, config
from vllm_repo.errors import UsageError
from vllm_repo.estimate import EstimateError, estimate_model
from vllm_repo.estimate.architecture import from_config
from vllm_repo.estimate.gpus import find_gpu
from vllm_repo.estimate.model_facts import ModelFacts
from vllm_repo.releases.memory_budget import Release, resolve_release
from vllm_repo.repository.engine_settings import EngineSettings


def facts(name: str, **overrides) -> ModelFacts:
    cfg = dict(config(name), **overrides)
    return ModelFacts(name, cfg, "test", None, from_config(cfg))


# estimate_model's own options; every other keyword is an engine setting.
OPTIONS = ("num_gpus", "usage_context", "target_concurrency", "model_runner_v2")


def run(name: str, gpu="H100 80GB", version="0.26.0", **kw):
    options = {k: kw.pop(k) for k in OPTIONS if k in kw}
    return estimate_model(name, gpu, vllm_version=version, facts=facts(name), settings=EngineSettings(**kw), **options)


def test_budget_adds_up():
    est = run("llama-3.1-8b", max_model_len=8192)
    parts = est.weights_gib + est.activation_gib + est.non_torch_gib + est.cudagraph_gib + est.kv_cache_gib
    assert parts == pytest.approx(est.requested_gib, abs=0.005)
    assert est.requested_gib == pytest.approx(79.19 * 0.92, abs=0.01)
    assert est.kv_cache_tokens == pytest.approx(est.kv_cache_gib * 2**30 / 131072, rel=0.001)
    assert est.max_concurrency == pytest.approx(est.kv_cache_tokens / 8192, rel=0.01)


@pytest.mark.parametrize(
    "version,util", [("0.6.4", 0.9), ("0.10.2", 0.9), ("0.20.1", 0.9), ("0.21.0", 0.92), ("0.32.0", 0.92)]
)
def test_default_utilization_by_release(version, util):
    assert run("qwen2.5-7b", version=version, max_model_len=4096).gpu_memory_utilization == util


def test_cudagraph_memory_subtracted_only_where_the_release_does():
    moe = "qwen3-235b-a22b"  # MoE: Model Runner V1, whose estimate is subtracted since 0.21
    before = run(moe, version="0.20.0", tensor_parallel_size=8, max_model_len=8192)
    after = run(moe, version="0.21.0", tensor_parallel_size=8, max_model_len=8192)
    eager = run(moe, version="0.21.0", tensor_parallel_size=8, max_model_len=8192, enforce_eager=True)
    assert before.cudagraph_gib == 0 and before.cudagraph_capture_gib > 0
    assert after.cudagraph_gib > 0
    assert eager.cudagraph_gib == 0 and eager.cudagraph_capture_gib == 0
    # dense models on Model Runner V2 in 0.26 (its profile_cudagraph_memory returned 0)
    assert run("llama-3.1-8b", version="0.26.0", max_model_len=8192).cudagraph_gib == 0


@pytest.mark.parametrize(
    "gpu,context,expected",
    [
        ("H100 80GB", "server", (8192, 1024)),
        ("H100 80GB", "llm", (16384, 1024)),
        ("A100 80GB", "server", (2048, 256)),
        ("L40S", "llm", (8192, 256)),
        ("H200", "engine", (2048, 128)),
    ],
)
def test_batch_defaults_by_gpu_and_usage_context(gpu, context, expected):
    est = run("qwen2.5-7b", gpu=gpu, usage_context=context, max_model_len=32768)
    assert (est.max_num_batched_tokens, est.max_num_seqs) == expected


def test_v0_profiles_the_whole_context_without_chunked_prefill():
    short = run("llama-3.1-8b", gpu="RTX 3090", version="0.6.4", max_model_len=20000, gpu_memory_utilization=0.9)
    assert short.max_num_batched_tokens == 20000
    long = run("llama-3.1-8b", gpu="RTX 3090", version="0.6.4", max_model_len=40000, gpu_memory_utilization=0.9)
    assert long.max_num_batched_tokens == 512  # chunked prefill switches on above 32k
    assert long.activation_gib < short.activation_gib


def test_tensor_parallel_must_divide_attention_heads():
    with pytest.raises(EstimateError, match=r"attention heads \(28\) must be divisible by tensor parallel size \(3\)"):
        run("qwen2.5-7b", tensor_parallel_size=3)


def test_model_too_long_for_the_kv_cache_gives_vllms_error():
    est = run("llama-3.1-8b", gpu="L4", max_model_len=131072)
    assert not est.fits
    assert "To serve at least one request with the model's max seq len (131072)" in est.error
    assert 0 < est.estimated_max_model_len < 131072
    # the estimated length does fit
    assert run("llama-3.1-8b", gpu="L4", max_model_len=est.estimated_max_model_len).fits


def test_weights_that_do_not_fit():
    est = run("qwen3-235b-a22b", max_model_len=4096)
    assert not est.fits and "out of memory while loading weights" in est.error


def test_utilization_above_free_memory_is_refused():
    est = run("qwen2.5-1.5b", gpu="RTX 4090", gpu_memory_utilization=0.99, max_model_len=4096)
    assert not est.fits and "less than desired GPU memory utilization" in est.error


def test_max_model_len_above_the_model_limit():
    est = run("qwen2.5-7b", max_model_len=65536)
    assert not est.fits and "derived max_model_len" in est.error


def test_release_resolution():
    assert resolve_release("0.32.0+cpu")[0].version.base_version == "0.32.0"
    with pytest.raises(UsageError, match="not a vLLM version"):
        resolve_release("latest")
    assert Release(resolve_release("0.7.2")[0].version).v0_engine


def test_reproduces_the_h200_measurements():
    """Activation and KV memory of the real vLLM 0.26.0 runs, from the constants in activation.py."""
    doc = json.loads((REPO / "bench/data/h200_calibration.json").read_text())
    for r in doc["runs"]:
        cfg = doc["model_configs"][r["preset"]]
        est = estimate_model(
            r["preset"],
            "H200",
            vllm_version="0.26.0",
            facts=ModelFacts(r["preset"], cfg, "t", None, from_config(cfg)),
            usage_context=r["usage_context"],
            model_runner_v2=r["model_runner"] == "v2",
            settings=EngineSettings(**r["engine_kwargs"]),
        )
        assert est.activation_gib == pytest.approx(r["activation_gib"], abs=0.03), r["name"]
        # Qwen2 models load 0.1 GiB more than their parameters in 0.26 (Llama: exactly its parameters)
        assert est.weights_gib == pytest.approx(r["weights_gib"], abs=0.12), r["name"]
        assert est.kv_cache_tokens == pytest.approx(r["kv_cache_tokens"], rel=0.005), r["name"]


def test_constants_are_the_fit_of_the_recorded_runs():
    from bench import calibrate
    from vllm_repo.estimate import activation

    doc = calibrate.load()
    c0, a, b = calibrate.fit_activation(doc)
    assert pytest.approx(c0, abs=0.001) == activation.ACTIVATION_BASE_GIB
    assert pytest.approx(a, abs=0.01) == activation.ACTIVATION_BYTES_PER_HIDDEN
    assert pytest.approx(b, abs=0.01) == activation.ACTIVATION_BYTES_PER_INTERMEDIATE
    assert pytest.approx(calibrate.fit_cudagraph(doc), abs=0.005) == activation.CUDAGRAPH_MIB_PER_LAYER_GRAPH
    assert pytest.approx(calibrate.fit_sampler(doc), abs=0.1) == activation.SAMPLER_BYTES_PER_LOGIT_SORTING


def test_model_runner_v1_sampler_sets_the_peak_with_many_rows():
    v1 = run(
        "llama-3.1-8b",
        gpu="H200",
        usage_context="server",
        max_model_len=8192,
        enforce_eager=True,
        model_runner_v2=False,
    )
    v2 = run("llama-3.1-8b", gpu="H200", usage_context="server", max_model_len=8192, enforce_eager=True)
    assert v1.activation_gib > 2 * v2.activation_gib
    assert any("sampler" in n for n in v1.notes)


def test_gpu_catalog_runtime_totals():
    assert find_gpu("H200").total_gib == pytest.approx(139.8)
    assert find_gpu("nvidia h100").name == "H100 80GB"
    assert not find_gpu("L4").measured and 21.5 < find_gpu("L4").total_gib < 22.5
