"""VR601: validate runs the memory estimator when a GPU is known and the model's config.json is local."""

import json
import re

from tests.support.model_configs import published_config
from tests.support.repo_builder import codes, only, run

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


def _hint_settings(hint):
    """The KEY=VALUE settings a VR601 hint offers."""
    return dict(re.findall(r"\b([a-z_]+)=([\w.]+)", hint or ""))


def test_vr601_hint_offers_no_more_gpus_than_the_host_has(repo, tmp_path):
    repo.model("llm", engine_args={"model": str(_model(tmp_path)), "max_model_len": 131072})
    (d,) = only(run(repo.root, gpu="L4", num_gpus=1), "VR601")
    assert "tensor_parallel_size" not in _hint_settings(d.hint)


def test_vr601_hint_offers_only_a_share_the_other_models_leave(repo, tmp_path):
    from tests.support.figures import commands_in, run_as_printed
    from vllm_repo.estimate.packing import DEFAULT_MARGIN_FRACTION

    small = tmp_path / "weights" / "qwen-1.5b"
    small.mkdir(parents=True)
    (small / "config.json").write_text(json.dumps(published_config("qwen2.5-1.5b")))
    config = 'backend: "vllm"\ninstance_group [ { count: 1, kind: KIND_GPU, gpus: [ 0 ] } ]\n'
    args = {"model": str(_model(tmp_path)), "max_model_len": 8192, "gpu_memory_utilization": 0.6}
    repo.model("llm", config=config, engine_args=args)
    repo.model(
        "other", config=config, engine_args={"model": str(small), "max_model_len": 4096, "gpu_memory_utilization": 0.3}
    )
    (d,) = only(run(repo.root, gpu="L4", num_gpus=1), "VR601")
    offered = _hint_settings(d.hint)
    if "gpu_memory_utilization" in offered:
        assert float(offered["gpu_memory_utilization"]) + 0.3 <= 1 - DEFAULT_MARGIN_FRACTION + 1e-9
    # Whatever the hint offers runs: each setting alone makes the model start without overcommitting the GPU...
    for key, value in offered.items():
        repo.model("llm", config=config, engine_args={**args, key: json.loads(value)})
        assert not {"VR601", "VR504"} & codes(run(repo.root, gpu="L4", num_gpus=1)), (key, value)
    repo.model("llm", config=config, engine_args=args)
    # ... and so does a command it prints.
    for command in commands_in(d.hint or ""):
        assert run_as_printed(command, tmp_path).exit_code == 0, command


def test_vr601_figures_say_what_is_short_even_when_it_rounds_to_nothing(repo, hf_model):
    from tests.support.figures import parts_larger_than_wholes

    # A tiny model whose KV cache is set a little short of one sequence of max_model_len: MiB, not "0.00 GiB".
    repo.model("llm", engine_args={"model": str(hf_model), "max_model_len": 512, "kv_cache_memory_bytes": 100_000})
    (d,) = only(run(repo.root, gpu="L4"), "VR601")
    assert "KV cache is needed" in d.message
    assert not parts_larger_than_wholes(d.message), d.message
    assert "0.00 GiB" not in d.message


def test_vr601_says_the_terms_exceed_the_budget_instead_of_a_part_larger_than_it(repo, tmp_path):
    from tests.support.figures import parts_larger_than_wholes

    args = {"model": str(_model(tmp_path)), "max_model_len": 8192, "gpu_memory_utilization": 0.3}
    repo.model("llm", engine_args=args)
    (d,) = only(run(repo.root, gpu="L4"), "VR601")
    assert not parts_larger_than_wholes(d.message), d.message
    assert not re.search(r"-\d[\d.]* GiB", d.message), d.message  # no negative KV cache: the terms exceed it
