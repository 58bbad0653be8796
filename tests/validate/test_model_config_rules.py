"""VR4xx: engine args against the model's own config.json, found offline (local directory or the HF cache)."""

import json

from tests.support.repo_builder import codes, only, run


def _local_model(tmp_path, **config):
    model = tmp_path / "weights" / "tiny"
    model.mkdir(parents=True)
    base = {
        "architectures": ["LlamaForCausalLM"],
        "num_attention_heads": 12,
        "num_key_value_heads": 4,
        "max_position_embeddings": 4096,
        "hidden_size": 768,
    }
    (model / "config.json").write_text(json.dumps({**base, **config}))
    return model


def test_vr401_max_model_len_above_model_limit(repo, tmp_path):
    model = _local_model(tmp_path)
    repo.model("llm", engine_args={"model": str(model), "max_model_len": 8192})
    (d,) = only(run(repo.root), "VR401")
    assert "4096" in d.message and d.line is not None
    repo.model("llm", engine_args={"model": str(model), "max_model_len": 4096})
    assert "VR401" not in codes(run(repo.root))


def test_vr401_counts_linear_rope_scaling(repo, tmp_path):
    model = _local_model(tmp_path, rope_scaling={"type": "linear", "factor": 2.0})
    repo.model("llm", engine_args={"model": str(model), "max_model_len": 8192})
    assert "VR401" not in codes(run(repo.root))


def test_vr402_tensor_parallel_must_divide_heads(repo, tmp_path):
    model = _local_model(tmp_path)
    repo.model("llm", engine_args={"model": str(model), "tensor_parallel_size": 8})
    (d,) = only(run(repo.root), "VR402")
    assert "12" in d.message and "4" in d.hint
    repo.model("llm", engine_args={"model": str(model), "tensor_parallel_size": 4})
    assert "VR402" not in codes(run(repo.root))


def test_hf_cache_is_used_offline(repo, tmp_path, monkeypatch):
    # A real hub cache layout: models--org--name/snapshots/<rev>/config.json and refs/main.
    cache = tmp_path / "hub"
    snapshot = cache / "models--acme--tiny" / "snapshots" / "0123456789abcdef"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"num_attention_heads": 6, "max_position_embeddings": 2048}))
    (cache / "models--acme--tiny" / "refs").mkdir()
    (cache / "models--acme--tiny" / "refs" / "main").write_text("0123456789abcdef")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    repo.model("llm", engine_args={"model": "acme/tiny", "tensor_parallel_size": 4, "max_model_len": 4096})
    assert {"VR401", "VR402"} <= codes(run(repo.root))


def test_unreachable_model_config_is_skipped(repo):
    repo.model("llm", engine_args={"model": "/models/not-here", "tensor_parallel_size": 7})
    assert not codes(run(repo.root)) & {"VR401", "VR402"}
