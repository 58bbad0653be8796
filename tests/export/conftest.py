"""Fixtures of the export tests: a test Hugging Face cache, a repository that fits on one node, one that spans nodes."""

from __future__ import annotations

from pathlib import Path

import huggingface_hub.constants
import pytest

from tests.support.export_repos import (
    BIG_CONFIG,
    BIG_MODEL,
    SMALL_CONFIG,
    SMALL_MODEL,
    big_engine_args,
    cache_model,
    make_repository,
)


@pytest.fixture(autouse=True)
def vllm_repo_version(monkeypatch):
    """The version the image's tag and wheel carry, fixed: the golden files stay as they are when it changes."""
    from vllm_repo.export import dockerfile

    real = dockerfile.vllm_repo_version
    monkeypatch.setattr(dockerfile, "vllm_repo_version", lambda: "0.1.0")
    return real


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def small_repo(tmp_path, hf_cache) -> Path:
    cache_model(hf_cache, SMALL_MODEL, SMALL_CONFIG, 15_231_233_024)
    return make_repository(tmp_path / "small-repo", {"qwen": {"model": SMALL_MODEL, "tensor_parallel_size": 2}})


@pytest.fixture
def big_repo(tmp_path, hf_cache) -> Path:
    cache_model(hf_cache, BIG_MODEL, BIG_CONFIG, 470_000_000_000)
    return make_repository(
        tmp_path / "big-repo", {"qwen3": big_engine_args(distributed_executor_backend="ray", max_model_len=32768)}
    )
