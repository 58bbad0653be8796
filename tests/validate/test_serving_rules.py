"""VR505 and VR509: a served engine's metrics, and an engine across hosts."""

from tests.support.repo_builder import codes, only, run


def test_vr505_custom_metrics_without_stats(repo):
    config = 'backend: "vllm"\nparameters { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }\n'
    repo.model("llm", config=config, engine_args={"model": "m", "disable_log_stats": True})
    assert "VR505" in codes(run(repo.root))
    repo.model("llm", config=config, engine_args={"model": "m", "disable_log_stats": False})
    assert "VR505" not in codes(run(repo.root))


def test_vr509_the_multiprocessing_executor_across_hosts(repo):
    spanning = {"model": "m", "tensor_parallel_size": 8, "pipeline_parallel_size": 2, "nnodes": 2}
    repo.model("llm", engine_args={**spanning, "master_addr": "10.0.0.1"})
    assert "VR509" not in codes(run(repo.root, num_gpus=8))  # 2 hosts of 8 GPUs, reachable leader
    assert "VR506" not in codes(run(repo.root, num_gpus=8))  # not "beyond the GPUs": across hosts
    repo.model("llm", engine_args=spanning)
    (d,) = only(run(repo.root, num_gpus=8), "VR509")
    assert "master_addr" in d.message and "--headless" in d.hint
    repo.model("llm", engine_args={**spanning, "master_addr": "10.0.0.1", "nnodes": 3})
    (d,) = only(run(repo.root), "VR509")
    assert "does not divide" in d.message and d.line is not None
    repo.model("llm", engine_args={**spanning, "master_addr": "10.0.0.1"})
    (d,) = only(run(repo.root, num_gpus=4), "VR509")
    assert "8 GPUs" in d.message and "nnodes 4" in d.hint
    repo.model("llm", engine_args={**spanning, "master_addr": "10.0.0.1", "node_rank": 1})
    (d,) = only(run(repo.root), "VR509")
    assert "node_rank 0" in d.message
    repo.model("llm", engine_args={**spanning, "distributed_executor_backend": "ray"})
    (d,) = only(run(repo.root), "VR509")
    assert "refuses" in d.message


def test_vr509_ray_across_hosts_is_noted_and_not_out_of_range(repo):
    repo.model("llm", engine_args={"model": "m", "tensor_parallel_size": 16, "distributed_executor_backend": "ray"})
    result = run(repo.root, num_gpus=8)
    (d,) = only(result, "VR509")
    assert d.severity.value == "info" and "2 hosts" in d.message and "ray start" in d.hint
    assert "VR506" not in codes(result)
    repo.model("llm", engine_args={"model": "m", "tensor_parallel_size": 16})
    result = run(repo.root, num_gpus=8)
    assert "VR509" not in codes(result)
    (d,) = only(result, "VR506")
    assert '"ray"' in d.hint and "nnodes" in d.hint
