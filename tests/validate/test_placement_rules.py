"""VR503-VR508: the GPUs each model instance's engine takes, across models and the GPUs configured."""

from tests.support.repo_builder import codes, only, run

KIND_GPU = 'backend: "vllm"\ninstance_group [ { kind: KIND_GPU count: 1 } ]\n'
KIND_GPU_1 = 'backend: "vllm"\ninstance_group [ { kind: KIND_GPU count: 1 gpus: [ 1 ] } ]\n'


def test_vr503_kind_gpu_with_tensor_parallel(repo):
    repo.model("llm", config=KIND_GPU, engine_args={"model": "m", "tensor_parallel_size": 2})
    (d,) = only(run(repo.root), "VR503")
    assert d.file.endswith("config.pbtxt")
    repo.model("llm", config=KIND_GPU, engine_args={"model": "m", "tensor_parallel_size": 1})
    assert "VR503" not in codes(run(repo.root))


def test_vr504_models_sharing_a_gpu(repo):
    repo.model("a", engine_args={"model": "m", "gpu_memory_utilization": 0.6})
    repo.model("b", engine_args={"model": "m", "gpu_memory_utilization": 0.5})
    (d,) = only(run(repo.root), "VR504")  # once for the GPU, naming both engines
    assert d.file.split("/")[-3] == "a" and "(a 0.6 + b 0.5)" in d.message
    assert "1.10" in d.message
    assert_quotes_both_failures(d.message)


def assert_quotes_both_failures(message):
    # vLLM's start-up check refuses an engine that finds less than its share free; engines starting together pass it
    # and one then finds no room for its KV cache.
    assert '"Free memory on device ... on startup is less than desired GPU memory utilization"' in message, message
    assert '"No available memory for the cache blocks"' in message


def test_vr504_is_reported_once_per_gpu_however_many_models_share_it(repo):
    for name in "abcde":
        repo.model(name, engine_args={"model": "m", "gpu_memory_utilization": 0.3})
    (d,) = only(run(repo.root), "VR504")
    assert "GPU 0 is shared by 5 engines" in d.message


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


def _config(group: str, gpu_device_ids: str | None = None) -> str:
    """A vLLM config.pbtxt with one instance_group, and GPU_DEVICE_IDS when given."""
    text = f'backend: "vllm"\ninstance_group [ {{ {group} }} ]\n'
    if gpu_device_ids is not None:
        text += f'parameters {{ key: "GPU_DEVICE_IDS" value: {{ string_value: "{gpu_device_ids}" }} }}\n'
    return text


def test_vr504_two_instances_of_one_model_on_one_gpu(repo):
    repo.model("a", config=_config("kind: KIND_GPU count: 2 gpus: [ 0 ]"), engine_args={"model": "m"})
    (d,) = only(run(repo.root), "VR504")
    assert d.file.endswith("config.pbtxt") and (d.line, d.column) == (2, 35)  # at count: 2
    assert "2 instances of a" in d.message and "0.46 or less" not in d.hint and "0.5 or less" in d.hint
    assert_quotes_both_failures(d.message)


def test_vr504_one_gpu_device_ids_group_for_every_instance(repo):
    config = _config("kind: KIND_MODEL count: 2", "0,1")
    repo.model("a", config=config, engine_args={"model": "m", "tensor_parallel_size": 2})
    (d,) = only(run(repo.root), "VR504")
    assert 'GPU_DEVICE_IDS "0,1"' in d.message and '"0,1;2,3"' in d.hint


def test_vr504_instances_that_fit_together_are_fine(repo):
    config = _config("kind: KIND_GPU count: 2 gpus: [ 0 ]")
    repo.model("a", config=config, engine_args={"model": "m", "gpu_memory_utilization": 0.45})
    assert "VR504" not in codes(run(repo.root))


def test_vr504_kind_model_instances_take_their_own_gpus(repo):
    # Instance k of a KIND_MODEL group runs on GPUs [k x size, (k+1) x size): no two share one.
    repo.model("a", config=_config("kind: KIND_MODEL count: 2"), engine_args={"model": "m", "tensor_parallel_size": 2})
    assert "VR504" not in codes(run(repo.root))


def test_vr504_a_model_pinned_by_gpu_device_ids_shares_with_a_kind_gpu_model(repo):
    repo.model("a", config=_config("kind: KIND_MODEL", "1"), engine_args={"model": "m", "gpu_memory_utilization": 0.6})
    config = _config("kind: KIND_GPU gpus: [ 1 ]")
    repo.model("b", config=config, engine_args={"model": "m", "gpu_memory_utilization": 0.6})
    (d,) = only(run(repo.root), "VR504")
    assert "GPU 1" in d.message and "(a 0.6 + b 0.6)" in d.message
    repo.model("b", config=_config("kind: KIND_GPU gpus: [ 0 ]"))
    assert "VR504" not in codes(run(repo.root))


def test_vr506_kind_gpu_lists_a_gpu_beyond_num_gpus(repo):
    repo.model("a", config=_config("kind: KIND_GPU gpus: [ 0, 9 ]"))
    (d,) = only(run(repo.root, num_gpus=8), "VR506")
    assert "GPU 9" in d.message and "0 to 7" in d.hint and d.line == 2
    assert "VR506" not in codes(run(repo.root, num_gpus=10))
    assert "VR506" not in codes(run(repo.root))  # no GPU count configured: nothing to check against


def test_vr506_kind_model_count_needs_more_gpus(repo):
    config = _config("kind: KIND_MODEL count: 3")
    repo.model("a", config=config, engine_args={"model": "m", "tensor_parallel_size": 4})
    (d,) = only(run(repo.root, num_gpus=8), "VR506")
    assert "12 GPUs in all" in d.message and "count: 2" in d.hint
    assert "VR506" not in codes(run(repo.root, num_gpus=12))


def test_vr506_gpu_device_ids_beyond_num_gpus(repo):
    config = _config("kind: KIND_MODEL count: 2", "0,1;8,9")
    repo.model("a", config=config, engine_args={"model": "m", "tensor_parallel_size": 2})
    (d,) = only(run(repo.root, num_gpus=4), "VR506")
    assert "GPUs 8, 9" in d.message and (d.line, d.column) == (3, 14)


def test_vr506_one_engine_larger_than_the_host(repo, tmp_path):
    repo.model("a", engine_args={"model": "m", "tensor_parallel_size": 16})
    (tmp_path / ".vllm-repo.toml").write_text("num-gpus = 8\n")
    (d,) = only(run(repo.root), "VR506")
    assert d.file.endswith("model.json") and "16 GPUs" in d.message
    repo.model("a", engine_args={"model": "m", "tensor_parallel_size": 8})
    assert "VR506" not in codes(run(repo.root))


def test_vr507_gpu_device_ids_group_of_the_wrong_size(repo):
    config = _config("kind: KIND_MODEL count: 2", "0,1,2;3,4,5")
    repo.model("a", config=config, engine_args={"model": "m", "tensor_parallel_size": 2})
    (d,) = only(run(repo.root), "VR507")
    assert d.severity.value == "error" and '"0,1,2" lists 3 GPUs' in d.message and '"0,1;2,3"' in d.hint
    config = _config("kind: KIND_MODEL count: 2", "0,1;2,3")
    repo.model("a", config=config, engine_args={"model": "m", "tensor_parallel_size": 2})
    assert "VR507" not in codes(run(repo.root))


def test_vr507_fewer_gpu_device_ids_groups_than_instances(repo):
    config = _config("kind: KIND_MODEL count: 3", "0,1;2,3")
    repo.model("a", config=config, engine_args={"model": "m", "tensor_parallel_size": 2})
    (d,) = only(run(repo.root), "VR507")
    assert "2 groups for 3 instances" in d.message and "0,1;2,3;4,5" in d.hint


def test_vr507_size_that_does_not_divide_num_gpus(repo):
    repo.model("a", engine_args={"model": "m", "tensor_parallel_size": 3})
    (d,) = only(run(repo.root, num_gpus=8), "VR507")
    assert d.severity.value == "warning" and "2 stay idle" in d.message and "1, 2, 4, 8" in d.hint
    assert "VR507" not in codes(run(repo.root, num_gpus=6))
    assert "VR507" not in codes(run(repo.root))


def test_vr508_gpu_device_ids_not_ids(repo):
    repo.model("a", config=_config("kind: KIND_MODEL", "cuda:0"))
    (d,) = only(run(repo.root), "VR508")
    assert d.severity.value == "error" and (d.line, d.column) == (3, 14)
    repo.model("a", config=_config("kind: KIND_MODEL", "0,0"))
    (d,) = only(run(repo.root), "VR508")
    assert "repeats a GPU" in d.message
    repo.model("a", config=_config("kind: KIND_MODEL", "0"))
    assert "VR508" not in codes(run(repo.root))


def test_vr508_overlapping_groups(repo):
    config = _config("kind: KIND_MODEL count: 2", "0,1;1,2")
    repo.model("a", config=config, engine_args={"model": "m", "tensor_parallel_size": 2})
    found = only(run(repo.root), "VR508")
    assert [(d.severity.value, "share GPU 1" in d.message) for d in found] == [("warning", True)]


def test_vr508_gpu_device_ids_ignored_without_kind_model(repo):
    repo.model("a", config=_config("kind: KIND_GPU", "0"))
    (d,) = only(run(repo.root), "VR508")
    assert d.severity.value == "warning" and "KIND_MODEL" in d.message
