"""VR501-VR502: a model's multi_lora.json against its model.json."""

import json

from tests.support.repo_builder import only, run


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
