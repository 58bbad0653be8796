"""export kubernetes: what the printed commands push, what the Hugging Face cache is sized for, and what storage
--max-replicas needs."""

from __future__ import annotations

from tests.support.export_repos import CONFIGS, SMALL_CONFIG, VLLM, by_kind, cache_model, make_repository
from vllm_repo.export import export_kubernetes
from vllm_repo.export.dockerfile import dockerfile
from vllm_repo.export.operator import OperatorOptions


def test_an_image_without_a_registry_is_built_not_pushed_to_docker_hub():
    local = dockerfile("nvcr.io/nvidia/tritonserver:26.06-vllm-python-py3", "vllm-repo-tritonserver:26.06", "1.0")
    commands = local.commands()
    assert not any(c.startswith("docker push") for c in commands)
    assert local.registry_hint and "--image REGISTRY/" in local.registry_hint
    pushed = dockerfile("nvcr.io/nvidia/tritonserver:26.06-vllm-python-py3", "registry.example/triton:1", "1.0")
    assert pushed.commands()[-1] == "docker push registry.example/triton:1" and pushed.registry_hint is None


def test_the_cache_claim_is_sized_for_what_comes_from_the_hub_only(tmp_path, hf_cache):
    cache_model(hf_cache, "org/heavy", SMALL_CONFIG, 100_000_000_000)
    weights = tmp_path / "weights"  # a local checkpoint of 50 GB, mounted from a claim: not in the cache
    weights.mkdir()
    (weights / "config.json").write_text((CONFIGS / f"{SMALL_CONFIG}.json").read_text())
    with open(weights / "model.safetensors", "wb") as f:
        f.truncate(50_000_000_000)
    volume = OperatorOptions(volumes=(f"weights:{weights}",))

    def claim(models: dict) -> str:
        repo = make_repository(tmp_path / "-".join(models) / "r", models)
        objects = by_kind(export_kubernetes(repo, vllm_version=VLLM, operator=volume).objects)
        return objects["PersistentVolumeClaim"]["spec"]["resources"]["requests"]["storage"]

    half = {"gpu_memory_utilization": 0.45}  # two engines share the GPU
    hub_only = claim({"m": {"model": "org/heavy", **half}})
    assert claim({"m": {"model": "org/heavy", **half}, "local": {"model": str(weights), **half}}) == hub_only
    assert claim({"local": {"model": str(weights)}}) == "20Gi"  # nothing comes from the Hub: the smallest claim


def test_max_replicas_says_which_claims_need_storage_that_many_pods_mount(small_repo):
    one = export_kubernetes(small_repo, vllm_version=VLLM, operator=OperatorOptions(volumes=("weights:/data",)))
    assert one.storage_notes == []
    scaled = export_kubernetes(
        small_repo, vllm_version=VLLM, operator=OperatorOptions(max_replicas=3, volumes=("weights:/data",))
    )
    (note,) = scaled.storage_notes
    assert "ReadWriteMany" in note and "weights" in note and "--storage-class" in note
