"""init on a GPU other models of the repository already use: it creates the model, writes only a share that the
estimator says starts there (leaving plan's margin free), or else no share and the plan command that sizes them all."""

from __future__ import annotations

import json

import pytest

from tests.support.figures import commands_in, run_as_printed
from tests.support.model_configs import published_config
from vllm_repo.estimate import estimate_for_engine_args
from vllm_repo.estimate.packing import DEFAULT_MARGIN_FRACTION
from vllm_repo.scaffold import init_model
from vllm_repo.scaffold.plan import plan_repository
from vllm_repo.validate import validate_paths

# An 8B Llama, a 7B Qwen and a 1.5B Qwen: what plan --pack places on one H200 (README, bench/results/pack.md).
THREE = (("chat", "llama-3.1-8b"), ("coder", "qwen2.5-7b"), ("small", "qwen2.5-1.5b"))


@pytest.fixture
def weights(tmp_path):
    dirs = {}
    for _, name in THREE:
        path = tmp_path / "weights" / name
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(published_config(name)))
        dirs[name] = str(path)
    return dirs


def written(repo):
    """Each model's model.json."""
    return {p.parent.parent.name: json.loads(p.read_text()) for p in sorted(repo.glob("*/1/model.json"))}


def fractions_written(repo):
    return [args["gpu_memory_utilization"] for args in written(repo).values() if "gpu_memory_utilization" in args]


def test_without_a_gpu_every_model_is_created_and_none_gets_a_share_it_may_not_start_in(tmp_path, weights):
    repo = tmp_path / "repo"
    results = [init_model(repo, weights[model], name=name, max_model_len=8192) for name, model in THREE]
    assert [r.model_dir.name for r in results] == ["chat", "coder", "small"]
    args = written(repo)
    # Without a GPU, init can't tell what starts in what the first model leaves: it writes no share for the others
    # (0.08 of any GPU does not hold a 7.6B model's weights) and says what sizes them all.
    assert "gpu_memory_utilization" not in args["coder"] and "gpu_memory_utilization" not in args["small"]
    for result in results[1:]:
        assert any("--pack all --write" in note for note in result.notes), result.notes
    # plan --pack then places all three.
    planned = plan_repository(repo, "H200", 1, concurrency=1, pack=True)
    for path, (_, new) in planned.changes.items():
        path.write_text(new)
    assert not validate_paths([repo], gpu="H200", num_gpus=1).has_errors
    assert sum(fractions_written(repo)) <= 1 - DEFAULT_MARGIN_FRACTION + 1e-9


def test_with_a_gpu_the_shares_leave_the_margin_and_the_printed_command_packs_them(tmp_path, weights):
    out = []
    for name, model in THREE:
        result = run_as_printed(
            f"vllm-repo init repo --model {weights[model]} --name {name} --max-model-len 8192 --gpu H200", tmp_path
        )
        assert result.exit_code == 0, result.output
        out.append(result.output)
        assert sum(fractions_written(tmp_path / "repo")) <= 1 - DEFAULT_MARGIN_FRACTION + 1e-9
    # Each share written is one the estimator says the engine starts with.
    for args in written(tmp_path / "repo").values():
        if "gpu_memory_utilization" in args:
            assert estimate_for_engine_args(args, "H200").fits
    commands = [c for text in out for c in commands_in(text)]
    assert any("--pack all --write" in c for c in commands), out
    for command in commands:  # every command init prints runs as printed
        assert run_as_printed(command, tmp_path).exit_code == 0, command
    assert not validate_paths([tmp_path / "repo"], gpu="H200", num_gpus=1).has_errors
    assert sum(fractions_written(tmp_path / "repo")) <= 1 - DEFAULT_MARGIN_FRACTION + 1e-9


def test_a_share_that_holds_the_model_is_written_and_checked(tmp_path, weights):
    repo = tmp_path / "repo"
    init_model(repo, weights["qwen2.5-1.5b"], name="a", max_model_len=8192, settings={"gpu_memory_utilization": 0.3})
    second = init_model(repo, weights["qwen2.5-1.5b"], name="b", max_model_len=8192, gpu="L4")
    share = second.engine_args["gpu_memory_utilization"]
    assert 0.3 + share <= 1 - DEFAULT_MARGIN_FRACTION + 1e-9
    assert estimate_for_engine_args(second.engine_args, "L4").fits
    assert not validate_paths([repo], gpu="L4", num_gpus=1).has_errors


def test_a_model_that_does_not_start_in_what_is_left_gets_no_share_and_no_command_that_fails(tmp_path, weights):
    repo = tmp_path / "repo"
    init_model(repo, weights["qwen2.5-1.5b"], name="a", max_model_len=8192, settings={"gpu_memory_utilization": 0.3})
    # 15 GiB of weights: not in the 0.65 of an L4 that is left, nor packed beside the other on one L4.
    result = init_model(repo, weights["qwen2.5-7b"], name="b", max_model_len=8192, gpu="L4")
    assert "gpu_memory_utilization" not in result.engine_args
    assert result.model_dir.is_dir()
    for command in commands_in("\n".join(result.notes)):
        assert run_as_printed(command, tmp_path).exit_code == 0, command
