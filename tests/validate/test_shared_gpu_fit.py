"""VR603: engines sharing a GPU, one of them with an absolute KV cache, whose footprints overfill it."""

import json

import pytest

from tests.support.model_configs import published_config
from tests.support.repo_builder import RepoBuilder, codes, only, run
from vllm_repo.estimate import resolve_gpu
from vllm_repo.estimate.model_facts import load_model_facts
from vllm_repo.estimate.packing import GiB, footprint
from vllm_repo.releases.memory_budget import resolve_release
from vllm_repo.repository.engine_settings import EngineSettings

KIND_GPU_0 = 'backend: "vllm"\ninstance_group [ { count: 1, kind: KIND_GPU, gpus: [ 0 ] } ]\n'


@pytest.fixture
def weights(tmp_path):
    path = tmp_path / "weights" / "llama-3.1-8b"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(published_config("llama-3.1-8b")))
    return {"llama-3.1-8b": str(path)}


@pytest.fixture
def repo(tmp_path):
    return RepoBuilder(tmp_path / "model_repository")


def test_vr603_engines_whose_absolute_budgets_overfill_a_shared_gpu(repo, weights):
    path = weights["llama-3.1-8b"]
    for name in ("a", "b"):
        args = {"model": path, "max_model_len": 8192, "gpu_memory_utilization": 0.45, "kv_cache_memory_bytes": 30 * GiB}
        repo.model(name, config=KIND_GPU_0, engine_args=args)
    (d,) = only(run(repo.root, gpu="H100 80GB", vllm_version="0.26.0"), "VR603")
    assert "GPU 0 is shared by 2 engines" in d.message and "KV 30.0 set" in d.message and "--pack all --write" in d.hint
    assert "VR504" not in codes(run(repo.root, gpu="H100 80GB", vllm_version="0.26.0"))  # the fractions fit
    # Each footprint is the estimator's fixed terms plus the KV cache set: what the message adds up.
    gpu, (release, _) = resolve_gpu("H100 80GB"), resolve_release("0.26.0")
    settings = EngineSettings(model=path, max_model_len=8192, kv_cache_memory_bytes=30 * GiB)
    one = footprint(settings, load_model_facts(path, offline=True), gpu, release)
    assert f"add up to {2 * one.total_bytes / GiB:.1f} GiB" in d.message
    # 20 GiB each fits: no finding.
    for name in ("a", "b"):
        args = {"model": path, "max_model_len": 8192, "gpu_memory_utilization": 0.45, "kv_cache_memory_bytes": 20 * GiB}
        repo.model(name, config=KIND_GPU_0, engine_args=args)
    assert "VR603" not in codes(run(repo.root, gpu="H100 80GB", vllm_version="0.26.0"))


def test_vr603_needs_a_gpu_and_an_absolute_budget(repo, weights):
    path = weights["llama-3.1-8b"]
    for name in ("a", "b"):
        args = {"model": path, "max_model_len": 8192, "kv_cache_memory_bytes": 60 * GiB, "gpu_memory_utilization": 0.4}
        repo.model(name, config=KIND_GPU_0, engine_args=args)
    assert "VR603" not in codes(run(repo.root, vllm_version="0.26.0"))  # no GPU named: nothing to add up against
    for name in ("a", "b"):  # fractions only are VR504's to add up
        repo.model(name, config=KIND_GPU_0, engine_args={"model": path, "gpu_memory_utilization": 0.6})
    found = codes(run(repo.root, gpu="H100 80GB", vllm_version="0.26.0"))
    assert "VR504" in found and "VR603" not in found
