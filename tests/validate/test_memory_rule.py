"""VR601: validate runs the memory estimator when a GPU is known and the model's config.json is local."""

import json

from tests.model_configs import published_config
from tests.validate.helpers import codes, only, run

# Llama-3.1-8B's real architecture (config.json as published), without weights: the estimator derives the
# parameter count from it.
LLAMA_8B = published_config("llama-3.1-8b")


def _model(tmp_path):
    path = tmp_path / "weights" / "llama-8b"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(LLAMA_8B))
    return path


def test_vr601_full_context_8b_does_not_fit_a_24gb_gpu(repo, tmp_path):
    repo.model("llm", engine_args={"model": str(_model(tmp_path)), "max_model_len": 131072})
    (d,) = only(run(repo.root, gpu="L4"), "VR601")
    assert "KV cache" in d.message and "max_model_len" in (d.hint or "") + d.message


def test_vr601_points_at_the_setting_to_change(repo, tmp_path):
    engine_args, model = repo.root / "llm" / "1" / "model.json", str(_model(tmp_path))
    repo.model("llm", engine_args={"model": model, "max_model_len": 131072})
    (d,) = only(run(repo.root, gpu="L4"), "VR601")
    first_fix = d.hint.split("=")[0]
    assert first_fix not in engine_args.read_text()  # not in the file: at max_model_len, the setting that is
    assert "max_model_len" in engine_args.read_text().splitlines()[d.line - 1]
    repo.model("llm", engine_args={"model": model, "max_model_len": 131072, first_fix: 1})
    (d,) = only(run(repo.root, gpu="L4"), "VR601")
    assert first_fix in engine_args.read_text().splitlines()[d.line - 1]


def test_a_context_longer_than_the_model_allows_is_reported_once(repo, tmp_path):
    repo.model("llm", engine_args={"model": str(_model(tmp_path)), "max_model_len": 200000})
    result = run(repo.root, gpu="T4")
    (d,) = only(result, "VR401")
    assert "VR601" not in codes(result)
    text = (repo.root / "llm" / "1" / "model.json").read_text().splitlines()
    assert "max_model_len" in text[d.line - 1]


def test_vr601_same_model_fits_an_h200_and_needs_a_gpu(repo, tmp_path):
    repo.model("llm", engine_args={"model": str(_model(tmp_path)), "max_model_len": 131072})
    assert "VR601" not in codes(run(repo.root, gpu="H200"))
    assert "VR601" not in codes(run(repo.root))  # no GPU known: nothing to check against


def test_vr601_gpu_from_project_settings(repo, tmp_path):
    repo.model("llm", engine_args={"model": str(_model(tmp_path)), "max_model_len": 131072})
    (tmp_path / ".vllm-repo.toml").write_text('gpu = "L4"\n')
    assert "VR601" in codes(run(repo.root))


def test_vr601_more_gpus_than_configured(repo, tmp_path):
    repo.model("llm", engine_args={"model": str(_model(tmp_path)), "tensor_parallel_size": 4})
    (d,) = only(run(repo.root, gpu="H100 80GB", num_gpus=2), "VR601")
    assert "4 GPUs" in d.message


def test_unknown_gpu_is_a_usage_error(repo):
    import pytest

    from vllm_repo.errors import UsageError

    repo.model("llm")
    with pytest.raises(UsageError, match="unknown GPU"):
        run(repo.root, gpu="H2000")


def test_vr602_says_when_the_memory_check_could_not_run(repo, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    repo.model("remote", engine_args={"model": "example-org/never-downloaded-7b"})
    repo.model("local", engine_args={"model": str(_model(tmp_path)), "max_model_len": 8192})
    result = run(repo.root, gpu="L4")
    (d,) = only(result, "VR602")
    assert "remote" in d.file and "did not run" in d.message and "`hf download " in d.hint
    assert "VR602" not in codes(run(repo.root))  # no GPU named: no memory check to miss
