"""init --gpu: engine sizes from the memory estimator, never overriding what the user fixed."""

from __future__ import annotations

import json

import pytest

from tests.support.model_configs import published_config
from vllm_repo.errors import UsageError
from vllm_repo.estimate.fit import parse_gpu
from vllm_repo.estimate.packing import DEFAULT_MARGIN_FRACTION
from vllm_repo.scaffold import init_model
from vllm_repo.validate import validate_paths

LLAMA_8B = published_config("llama-3.1-8b")
LLAMA_70B = {
    **LLAMA_8B,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
}


@pytest.fixture
def model_dir(tmp_path):
    def make(config: dict, name: str):
        path = tmp_path / "models" / name
        path.mkdir(parents=True)
        (path / "config.json").write_text(json.dumps(config))
        return path

    return make


def engine_args(result):
    return json.loads((result.model_dir / "1" / "model.json").read_text())


def test_an_8b_model_on_one_24gb_gpu_gets_a_context_that_fits(tmp_path, model_dir):
    result = init_model(tmp_path / "repo", str(model_dir(LLAMA_8B, "llama-8b")), gpu="L4")
    args = engine_args(result)
    assert args["tensor_parallel_size"] == 1
    # 16 GB of bf16 weights leave a few GB of KV cache: far less than the model's 131072 positions, more than 8k.
    assert 8192 <= args["max_model_len"] < 131072
    assert 0 < args["gpu_memory_utilization"] <= 1
    assert any("max_model_len" in n for n in result.notes)
    # validate's own memory check agrees with the size init chose.
    assert not validate_paths([result.model_dir], gpu="L4").has_errors


def test_a_70b_model_is_spread_over_enough_gpus(tmp_path, model_dir):
    result = init_model(tmp_path / "repo", str(model_dir(LLAMA_70B, "llama-70b")), gpu="H100")
    args = engine_args(result)
    assert args["tensor_parallel_size"] > 1 and 64 % args["tensor_parallel_size"] == 0
    assert any("tensor_parallel_size" in n for n in result.notes)
    assert "KIND_MODEL" in (result.model_dir / "config.pbtxt").read_text()
    assert not validate_paths([result.model_dir]).has_errors


def test_the_users_tensor_parallel_size_is_kept_and_the_context_shrinks_instead(tmp_path, model_dir):
    result = init_model(tmp_path / "repo", str(model_dir(LLAMA_70B, "llama-70b")), gpu="H100", tensor_parallel_size=2)
    args = engine_args(result)
    assert args["tensor_parallel_size"] == 2
    assert args["max_model_len"] < 131072


def test_the_users_max_model_len_is_kept(tmp_path, model_dir):
    result = init_model(tmp_path / "repo", str(model_dir(LLAMA_8B, "llama-8b")), gpu="L4", max_model_len=4096)
    assert engine_args(result)["max_model_len"] == 4096


def test_what_cannot_fit_is_said_and_left_unset(tmp_path, model_dir):
    result = init_model(tmp_path / "repo", str(model_dir(LLAMA_70B, "llama-70b")), gpu="2xT4")
    args = engine_args(result)
    assert not {"tensor_parallel_size", "gpu_memory_utilization", "max_model_len"} & set(args)
    assert any(n.startswith("could not fit") and "2 x T4" in n for n in result.notes)


def test_an_unreachable_model_config_still_scaffolds(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    result = init_model(tmp_path / "repo", "some-org/not-in-any-cache", gpu="H100")
    assert engine_args(result)["model"] == "some-org/not-in-any-cache"
    assert any("could not size" in n for n in result.notes)


def test_an_unknown_gpu_is_a_clear_error(tmp_path, model_dir):
    with pytest.raises(UsageError) as err:
        init_model(tmp_path / "repo", str(model_dir(LLAMA_8B, "llama-8b")), gpu="H1OO")
    assert "H1OO" in err.value.message and "--gpu" in err.value.hint
    assert not (tmp_path / "repo" / "llama-8b").exists()


@pytest.mark.parametrize(
    "text, expected",
    [
        ("H100", ("H100", None)),
        ("2xL4", ("L4", 2)),
        ("4 x A100 80GB", ("A100 80GB", 4)),
        ("L4x2", ("L4", 2)),
        ("24", ("24", None)),
    ],
)
def test_gpu_counts_are_read_from_the_name(text, expected):
    assert parse_gpu(text) == expected


def test_gpu_sizing_fits_into_what_the_other_models_leave(tmp_path, hf_model):
    repo = tmp_path / "repo"
    init_model(repo, str(hf_model), name="chat", settings={"gpu_memory_utilization": 0.5})
    result = init_model(repo, str(hf_model), name="coder", gpu="L4")
    share = result.engine_args["gpu_memory_utilization"]
    # Not the default 0.9 / 0.92, which VR504 refuses, nor all that is left: plan's margin stays free.
    assert share > 0 and 0.5 + share <= 1 - DEFAULT_MARGIN_FRACTION + 1e-9
    assert any("sized for L4" in note for note in result.notes), result.notes
    assert not validate_paths([repo]).has_errors
