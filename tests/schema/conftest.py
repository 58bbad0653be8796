"""Fixtures for the schema tests: the serving environment's interpreter (real vLLM), when there is one."""

from __future__ import annotations

import os

import pytest

SERVING_PYTHON = os.environ.get("VLLM_REPO_SERVING_PYTHON")
NEEDS_VLLM = pytest.mark.skipif(
    not SERVING_PYTHON,
    reason="needs an interpreter with vLLM installed: set VLLM_REPO_SERVING_PYTHON "
    "(`eval \"$(bash .ci/setup-serving.sh | sed 's/^/export /')\"`, which scripts/test.sh does)",
)


@pytest.fixture
def serving_python() -> str:
    assert SERVING_PYTHON
    return SERVING_PYTHON
