"""Offline behaviour: local directories and the local HF cache only, never the network; validate's entry point
returns None when the config is not reachable."""

from __future__ import annotations

import json
import types

import huggingface_hub
import huggingface_hub.constants
import pytest

from tests.support.estimate_models import config, llama_tensors, model_dir, write_safetensors
from vllm_repo.estimate import EstimateError, estimate_for_engine_args
from vllm_repo.estimate.model_facts import ModelNotAvailableOffline, load_model_facts

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def hub_answers(monkeypatch):
    """The Hub is taken as reachable: the tests below fake huggingface_hub's own answers."""
    import vllm_repo.estimate.model_facts as model_facts

    monkeypatch.setattr(model_facts, "_check_hub_reachable", lambda repo_id: None)


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the network was used")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", refuse)


def cache_model(cache, repo_id: str, cfg: dict, with_weights: bool = False):
    """The layout huggingface_hub writes: models--org--name/{refs/main, snapshots/<commit>/...}."""
    root = cache / f"models--{repo_id.replace('/', '--')}"
    snap = root / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(COMMIT)
    (snap / "config.json").write_text(json.dumps(cfg))
    if with_weights:
        write_safetensors(snap / "model.safetensors", llama_tensors(cfg))


def test_uncached_repo_is_none_for_validate(hf_cache, no_network):
    assert estimate_for_engine_args({"model": "org/not-cached"}, "H100 80GB") is None
    with pytest.raises(ModelNotAvailableOffline, match="huggingface-cli download org/not-cached"):
        load_model_facts("org/not-cached", offline=True)


def test_cached_config_is_enough(hf_cache, no_network):
    cache_model(hf_cache, "meta-llama/Llama-3.1-8B-Instruct", config("llama-3.1-8b"))
    est = estimate_for_engine_args(
        {"model": "meta-llama/Llama-3.1-8B-Instruct", "max_model_len": 8192}, "H100 80GB", vllm_version="0.26.0"
    )
    assert est is not None and est.fits
    assert est.weights_source == "parameter count from the architecture" and est.approximate["weights"]


def test_cached_weights_read_from_their_headers(hf_cache, no_network, tiny_llama):
    cache_model(hf_cache, "org/tiny", tiny_llama, with_weights=True)
    facts = load_model_facts("org/tiny", offline=True)
    assert facts.weights.source == "safetensors headers"


def test_hf_hub_offline_env_means_offline(hf_cache, no_network, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailableOffline):
        load_model_facts("org/elsewhere")


def test_engine_args_from_model_json(tmp_path, no_network):
    d = model_dir(tmp_path, config("qwen2.5-7b"), weights=False)
    args = {
        "model": str(d),
        "max_model_len": "16384",
        "gpu_memory_utilization": 0.45,
        "enforce_eager": "true",
        "tensor_parallel_size": 1,
        "disable_log_stats": True,
    }
    est = estimate_for_engine_args(args, "L40S", vllm_version="0.26.0")
    assert (est.max_model_len, est.gpu_memory_utilization, est.enforce_eager) == (16384, 0.45, True)
    # values the schema rules reject are not the estimate's business
    assert estimate_for_engine_args(dict(args, max_model_len="16k"), "L40S") is None
    assert estimate_for_engine_args({"max_model_len": 4096}, "L40S") is None
    # settings vLLM refuses outright are raised for validate to report
    with pytest.raises(EstimateError, match="divisible"):
        estimate_for_engine_args(dict(args, tensor_parallel_size=3), "L40S", num_gpus=4)


def test_model_that_cannot_start_is_reported_with_vllms_error(tmp_path, no_network):
    d = model_dir(tmp_path, config("llama-3.1-8b"), weights=False)
    est = estimate_for_engine_args({"model": str(d)}, "L4", vllm_version="0.26.0")
    assert est is not None and not est.fits and "max seq len (131072)" in est.error
    assert {r.setting for r in est.recommendations} >= {"max_model_len"}


def test_relative_model_path_resolved_against_base(tmp_path, no_network):
    model_dir(tmp_path, config("qwen2.5-1.5b"), weights=False, name="models/qwen")
    est = estimate_for_engine_args({"model": "models/qwen", "max_model_len": 4096}, 24, base=tmp_path)
    assert est is not None and est.gpu_total_gib == 24


# --- the online path, with huggingface_hub's two calls answered locally --------------------------------------
def test_online_reads_config_and_safetensors_metadata(tmp_path, hf_cache, hub_answers, monkeypatch, tiny_llama):
    """The Hub answers with config.json and the safetensors headers; no weights are downloaded."""
    from huggingface_hub.utils._safetensors import SafetensorsFileMetadata, SafetensorsRepoMetadata, TensorInfo

    (tmp_path / "config.json").write_text(json.dumps(tiny_llama))
    size = write_safetensors(tmp_path / "model.safetensors", llama_tensors(tiny_llama))
    from vllm_repo.estimate.model_facts import read_safetensors_header

    header = read_safetensors_header(tmp_path / "model.safetensors")
    tensors = {
        n: TensorInfo(dtype=v["dtype"], shape=v["shape"], data_offsets=tuple(v["data_offsets"]))
        for n, v in header.items()
        if n != "__metadata__"
    }
    calls = []

    def download(repo_id, filename, revision=None, token=None):
        calls.append((repo_id, filename, token))
        assert filename == "config.json"
        return str(tmp_path / "config.json")

    def metadata(repo_id, revision=None, token=None):
        calls.append((repo_id, "safetensors", token))
        files = {"model.safetensors": SafetensorsFileMetadata(metadata={}, tensors=tensors)}
        return SafetensorsRepoMetadata(
            metadata=None, sharded=False, files_metadata=files, weight_map=dict.fromkeys(tensors, "model.safetensors")
        )

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(huggingface_hub, "get_safetensors_metadata", metadata)
    facts = load_model_facts("org/tiny", offline=False, token="hf_x")
    assert facts.weights.source == "hub safetensors metadata" and facts.weights.total_bytes == size
    assert calls == [("org/tiny", "config.json", "hf_x"), ("org/tiny", "safetensors", "hf_x")]


def test_gated_and_missing_repos_are_explained(hf_cache, hub_answers, monkeypatch):
    from huggingface_hub.utils import GatedRepoError, RepositoryNotFoundError

    from vllm_repo.estimate.model_facts import ModelFactsError

    response = types.SimpleNamespace(headers={}, request=None)  # what the errors read off an HTTP response

    def gated(*args, **kwargs):
        raise GatedRepoError("403", response=response)

    def missing(*args, **kwargs):
        raise RepositoryNotFoundError("404", response=response)

    def unreachable(*args, **kwargs):
        raise OSError("connection refused")

    for fake, message in (
        (gated, "gated: accept its licence"),
        (missing, "no such model"),
        (unreachable, "can't reach the Hugging Face Hub"),
    ):
        monkeypatch.setattr(huggingface_hub, "hf_hub_download", fake)
        with pytest.raises(ModelFactsError, match=message):
            load_model_facts("org/model", offline=False)


def test_config_without_a_decoder_shape_is_skipped(tmp_path):
    d = tmp_path / "odd"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "whisper-ish", "d_model": 512}))
    assert estimate_for_engine_args({"model": str(d)}, "L4") is None


def test_an_unreachable_hub_fails_at_once_with_the_offline_way_out(tmp_path):
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{port}", "HF_HUB_CACHE": str(tmp_path / "hf")}
    env.pop("HF_HUB_OFFLINE", None)
    done = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "estimate", "example-org/never-downloaded-7b", "--gpu", "L4"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    assert "can't reach the Hugging Face Hub" in done.stderr and "Connection refused" in done.stderr
    assert "--offline" in done.stderr and "Retrying" not in done.stderr  # one attempt, not huggingface_hub's five
    assert "Error)" not in done.stderr  # no bare exception class name in place of a reason
