"""VR5xx: across a model's files and across models."""

import json

from tests.validate.helpers import codes, only, run

KIND_GPU = 'backend: "vllm"\ninstance_group [ { kind: KIND_GPU count: 1 } ]\n'
KIND_GPU_1 = 'backend: "vllm"\ninstance_group [ { kind: KIND_GPU count: 1 gpus: [ 1 ] } ]\n'


def test_vr501_enable_lora_without_multi_lora(repo):
    repo.model("llm", engine_args={"model": "m", "enable_lora": True})
    (d,) = only(run(repo.root), "VR501")
    assert d.severity.value == "error" and "multi_lora.json" in d.message


def test_vr501_invalid_multi_lora(repo):
    repo.model("llm", engine_args={"model": "m", "enable_lora": True}, files={"1/multi_lora.json": '{"a": }'})
    (d,) = only(run(repo.root), "VR501")
    assert d.line == 1 and d.file.endswith("multi_lora.json")


def test_vr501_multi_lora_without_enable_lora_is_info(repo):
    repo.model("llm", files={"1/multi_lora.json": '{"alpaca": "/weights/alpaca"}'})
    (d,) = only(run(repo.root), "VR501")
    assert d.severity.value == "info"


def test_vr502_adapter_path_missing(repo, tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    lora = json.dumps({"good": str(adapter), "bad": str(tmp_path / "nope"), "hub": "org/adapter"})
    repo.model("llm", engine_args={"model": "m", "enable_lora": True}, files={"1/multi_lora.json": lora})
    (d,) = only(run(repo.root), "VR502")
    assert "'bad'" in d.message


def test_vr503_kind_gpu_with_tensor_parallel(repo):
    repo.model("llm", config=KIND_GPU, engine_args={"model": "m", "tensor_parallel_size": 2})
    (d,) = only(run(repo.root), "VR503")
    assert d.file.endswith("config.pbtxt")
    repo.model("llm", config=KIND_GPU, engine_args={"model": "m", "tensor_parallel_size": 1})
    assert "VR503" not in codes(run(repo.root))


def test_vr504_models_sharing_a_gpu(repo):
    repo.model("a", engine_args={"model": "m", "gpu_memory_utilization": 0.6})
    repo.model("b", engine_args={"model": "m", "gpu_memory_utilization": 0.5})
    found = only(run(repo.root), "VR504")
    assert {d.file.split("/")[-3] for d in found} == {"a", "b"}
    assert "1.10" in found[0].message


def test_vr504_default_utilization_counts(repo):
    repo.model("a", engine_args={"model": "m"})
    repo.model("b", engine_args={"model": "m", "gpu_memory_utilization": 0.1})
    assert "VR504" in codes(run(repo.root))


def test_vr504_models_on_different_gpus_are_fine(repo):
    repo.model("a", engine_args={"model": "m", "gpu_memory_utilization": 0.8})
    repo.model("b", config=KIND_GPU_1, engine_args={"model": "m", "gpu_memory_utilization": 0.8})
    assert "VR504" not in codes(run(repo.root))


def test_vr504_exactly_one_is_fine(repo):
    repo.model("a", engine_args={"model": "m", "gpu_memory_utilization": 0.2})
    repo.model("b", engine_args={"model": "m", "gpu_memory_utilization": 0.8})
    assert "VR504" not in codes(run(repo.root))


def test_vr504_reported_for_the_selected_file_only(repo):
    repo.model("a", engine_args={"model": "m", "gpu_memory_utilization": 0.6})
    repo.model("b", engine_args={"model": "m", "gpu_memory_utilization": 0.6})
    found = only(run(repo.root / "a" / "1" / "model.json"), "VR504")
    assert [d.file.split("/")[-3] for d in found] == ["a"]


def test_vr505_custom_metrics_without_stats(repo):
    config = 'backend: "vllm"\nparameters { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }\n'
    repo.model("llm", config=config, engine_args={"model": "m", "disable_log_stats": True})
    assert "VR505" in codes(run(repo.root))
    repo.model("llm", config=config, engine_args={"model": "m", "disable_log_stats": False})
    assert "VR505" not in codes(run(repo.root))
