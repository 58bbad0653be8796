"""launch refuses a Hugging Face model it can't load before Triton starts: a repo id the local cache has no copy of,
with the Hub unreachable (or offline mode on), would fail to load after vLLM's retries (doctor's VD114)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest

from tests.support.serving import NEEDS_SERVING, SERVING_PYTHON
from vllm_repo.repository import open_repository
from vllm_repo.scaffold import init_model
from vllm_repo.serve.errors import LaunchError
from vllm_repo.serve.hub_check import check_hub_models
from vllm_repo.serve.launch_plan import prepare_launch

REPO_ID = "some-org/not-cached-0.5b"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


@pytest.fixture
def offline_host(tmp_path) -> dict[str, str]:
    """An environment whose Hub refuses connections and whose Hugging Face cache is empty."""
    return {"HF_HOME": str(tmp_path / "hf-home"), "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}"}


def _repository(tmp_path: Path, model: str = REPO_ID) -> Path:
    repo = tmp_path / "model_repository"
    init_model(repo, model, name="llm")
    return repo


def _cache(environ: dict[str, str], repo_id: str) -> None:
    snapshot = Path(environ["HF_HOME"]) / "hub" / f"models--{repo_id.replace('/', '--')}" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "qwen2"}))


def test_an_uncached_hub_model_with_the_hub_unreachable_is_refused_at_once(tmp_path, offline_host):
    models = open_repository(_repository(tmp_path)).models
    started = time.monotonic()
    with pytest.raises(LaunchError) as caught:
        check_hub_models(models, offline_host)
    assert time.monotonic() - started < 10  # one connection, not huggingface_hub's retries
    error = caught.value
    assert REPO_ID in error.message and "can't reach the Hugging Face Hub" in error.message
    assert "llm" in error.message and "VD114" in error.message
    for advice in ("local directory", f"`hf download {REPO_ID}`", "HF_HOME", "HTTPS_PROXY"):
        assert advice in error.hint, error.hint


def test_offline_mode_without_a_copy_is_refused_naming_the_setting(tmp_path, offline_host):
    models = open_repository(_repository(tmp_path)).models
    with pytest.raises(LaunchError) as caught:
        check_hub_models(models, {**offline_host, "HF_HUB_OFFLINE": "1"})
    assert "HF_HUB_OFFLINE" in caught.value.message and "can't reach" not in caught.value.message


def test_a_cached_model_or_a_local_directory_needs_no_hub(tmp_path, offline_host, hf_model):
    _cache(offline_host, REPO_ID)
    check_hub_models(open_repository(_repository(tmp_path / "a")).models, offline_host)
    check_hub_models(open_repository(_repository(tmp_path / "b", str(hf_model))).models, offline_host)


@NEEDS_SERVING
def test_launch_says_it_before_starting_triton(tmp_path, offline_host, monkeypatch):
    for name, value in offline_host.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    with pytest.raises(LaunchError) as caught:
        prepare_launch(_repository(tmp_path), http_port=0, grpc_port=0, metrics_port=0, python=SERVING_PYTHON)
    assert "can't reach the Hugging Face Hub" in caught.value.message
