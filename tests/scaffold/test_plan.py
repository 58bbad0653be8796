"""plan: tensor parallelism or more instances per model, from the estimator, written into config.pbtxt and
model.json so that validate's placement rules accept the result."""

import json
import subprocess
import sys

import pytest

from tests.support.model_configs import published_config
from tests.support.repo_builder import RepoBuilder, codes, run
from vllm_repo.scaffold.plan import PlanError, candidate_sizes, placement_config, plan_repository


@pytest.fixture
def weights(tmp_path):
    """Llama-3.1-8B's published config.json, without weights: the estimator sizes it from the architecture."""
    path = tmp_path / "weights" / "llama-8b"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(published_config("llama-3.1-8b")))
    return str(path)


@pytest.fixture
def repo(tmp_path):
    return RepoBuilder(tmp_path / "model_repository")


def test_candidate_sizes_divide_the_heads_and_stay_within_the_gpus():
    assert candidate_sizes(32, 8) == [1, 2, 4, 8]
    assert candidate_sizes(40, 8) == [1, 2, 4, 8]
    assert candidate_sizes(12, 16) == [1, 2, 4]
    assert candidate_sizes(32, 3) == [1, 2]


def test_a_small_model_gets_one_instance_per_gpu(repo, weights):
    repo.model("chat", engine_args={"model": weights, "max_model_len": 8192})
    planned = plan_repository(repo.root, "H100 80GB", 4, concurrency=8)
    (chat,), changes = planned.models, planned.changes
    assert (chat.chosen.tensor_parallel_size, chat.instances) == (1, 4)
    assert chat.gpu_groups == [(0,), (1,), (2,), (3,)]
    config = changes[repo.root / "chat" / "config.pbtxt"][1]
    assert "kind: KIND_GPU" in config and "gpus: [ 0, 1, 2, 3 ]" in config


def test_a_long_context_takes_tensor_parallelism_and_gpu_device_ids(repo, weights):
    repo.model("chat", engine_args={"model": weights, "max_model_len": 32768})
    repo.model("long", engine_args={"model": weights, "max_model_len": 131072})
    planned = plan_repository(repo.root, "H100 80GB", 8, concurrency=16)
    plans, changes = planned.models, planned.changes
    by_name = {p.name: p for p in plans}
    assert by_name["long"].chosen.tensor_parallel_size > 1
    used = [gpu for p in plans for group in p.gpu_groups for gpu in group]
    assert sorted(used) == sorted(set(used)) and max(used) < 8  # no GPU twice, none beyond the host
    for p in plans:
        assert p.instances * p.chosen.concurrency >= 16
    long_config = changes[repo.root / "long" / "config.pbtxt"][1]
    assert "GPU_DEVICE_IDS" in long_config and "kind: KIND_MODEL" in long_config
    text = changes[repo.root / "long" / "1" / "model.json"][1]
    assert json.loads(text)["tensor_parallel_size"] == by_name["long"].chosen.tensor_parallel_size
    lines = "\n".join(by_name["long"].explain(16))
    assert "KV tokens per instance" in lines and "per GPU: weights" in lines and "not tensor_parallel_size" in lines


def test_what_plan_writes_passes_the_placement_rules(repo, weights):
    repo.model("chat", engine_args={"model": weights, "max_model_len": 32768})
    repo.model("long", engine_args={"model": weights, "max_model_len": 131072})
    changes = plan_repository(repo.root, "H100 80GB", 8, concurrency=16).changes
    for path, (_, new) in changes.items():
        path.write_text(new)
    assert not {"VR504", "VR506", "VR507", "VR508"} & codes(run(repo.root, gpu="H100 80GB", num_gpus=8))
    unchanged = plan_repository(repo.root, "H100 80GB", 8, concurrency=16).changes
    assert unchanged == {}  # planned once, planned for good


def test_a_fraction_meant_for_a_shared_gpu_is_named_as_the_cause_not_the_context_length(repo, weights):
    repo.model("big", engine_args={"model": weights, "max_model_len": 131072, "gpu_memory_utilization": 0.05})
    with pytest.raises(PlanError) as caught:
        plan_repository(repo.root, "H100 80GB", 8, concurrency=1)
    assert "gpu_memory_utilization 0.05" in caught.value.message and "only that fraction" in caught.value.message
    assert "max_model_len" not in caught.value.hint
    tp = int(caught.value.hint.split("tensor_parallel_size ")[1].split(":")[0])
    # What the hint says is true: without the fraction, plan places it at that size.
    repo.model("big", engine_args={"model": weights, "max_model_len": 131072})
    (big,) = plan_repository(repo.root, "H100 80GB", 8, concurrency=1).models
    assert big.options[0].tensor_parallel_size == tp


def test_too_many_models_for_the_host_is_an_error(repo, weights):
    repo.model("a", engine_args={"model": weights, "max_model_len": 131072})
    repo.model("b", engine_args={"model": weights, "max_model_len": 131072})
    with pytest.raises(PlanError, match="GPUs") as caught:
        plan_repository(repo.root, "H100 80GB", 2, concurrency=16)
    assert "--concurrency" in caught.value.hint


def test_placement_config_keeps_the_rest_of_config_pbtxt():
    text = (
        'backend: "vllm"\n# keep me\ninstance_group [ { count: 2 kind: KIND_GPU } ]\n'
        'parameters { key: "GPU_DEVICE_IDS" value: { string_value: "0" } }\n'
        'parameters { key: "DEFAULT_MAX_TOKENS" value: { string_value: "64" } }\n'
    )
    new = placement_config(text, [(0, 1), (2, 3)])
    assert "# keep me" in new and "DEFAULT_MAX_TOKENS" in new and "KIND_GPU" not in new
    assert new.count("instance_group") == 1 and 'string_value: "0,1;2,3"' in new and "count: 2" in new


def test_placement_goes_where_init_wrote_the_instance_group_and_replaces_its_comment(tmp_path):
    from vllm_repo.scaffold.init import render_config

    text = render_config("chat", "m", {"model": "m"})
    assert "KIND_MODEL lets vLLM choose its device" in text
    new = placement_config(text, [(0,), (1,)])
    assert "KIND_MODEL lets vLLM choose its device" not in new and "# Placed by vllm-repo plan" in new
    fields = [line.split()[0] for line in new.splitlines() if line and not line.startswith((" ", "#", "]", "}"))]
    before = [line.split()[0] for line in text.splitlines() if line and not line.startswith((" ", "#", "]", "}"))]
    assert fields == before  # instance_group where it was, before the parameters that followed it
    assert placement_config(new, [(0,), (1,)]) == new  # planned again: the same text


def test_cli_prints_the_plan_diffs_and_writes_only_when_asked(repo, weights, tmp_path):
    repo.model("chat", engine_args={"model": weights, "max_model_len": 8192})
    config = repo.root / "chat" / "config.pbtxt"
    before = config.read_text()
    args = [sys.executable, "-m", "vllm_repo", "plan", str(repo.root), "--gpu", "H100", "--num-gpus", "2"]
    shown = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "chat: 2 instances x tensor_parallel_size 1" in shown.stdout and config.read_text() == before
    diff = subprocess.run([*args, "--diff"], capture_output=True, text=True, cwd=tmp_path)
    # Showing the changes is what was asked: it succeeds, and does not tell the user to use the flag just given.
    assert diff.returncode == 0 and "+    gpus: [ 0, 1 ]" in diff.stdout and config.read_text() == before
    assert "--diff" not in diff.stderr and "--write writes" in diff.stderr
    written = subprocess.run([*args, "--write"], capture_output=True, text=True, cwd=tmp_path)
    assert written.returncode == 0 and "gpus: [ 0, 1 ]" in config.read_text()
    missing = subprocess.run(args[:5], capture_output=True, text=True, cwd=tmp_path)
    assert missing.returncode == 2 and "--num-gpus" in missing.stderr
