"""The serving environment the end-to-end tests need (built by .ci/setup-serving.sh; scripts/test.sh exports it),
the marks that skip a test without it, and the CLI as a test runs it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SERVING_PYTHON = os.environ.get("VLLM_REPO_SERVING_PYTHON")
TRITON_HOME = os.environ.get("VLLM_REPO_TRITON_HOME")
SERVING_SKIP_REASON = (
    "needs a real Triton server and vLLM: set VLLM_REPO_SERVING_PYTHON and VLLM_REPO_TRITON_HOME to the lines printed "
    "by `bash .ci/setup-serving.sh` (`eval \"$(bash .ci/setup-serving.sh | sed 's/^/export /')\"`; scripts/test.sh "
    "does it)"
)
needs_serving = pytest.mark.skipif(not (SERVING_PYTHON and TRITON_HOME), reason=SERVING_SKIP_REASON)
NEEDS_SERVING = needs_serving
# The schema tests that import a real vLLM need its interpreter only, not Triton.
NEEDS_VLLM = pytest.mark.skipif(
    not SERVING_PYTHON,
    reason="needs an interpreter with vLLM installed: set VLLM_REPO_SERVING_PYTHON "
    "(`eval \"$(bash .ci/setup-serving.sh | sed 's/^/export /')\"`, which scripts/test.sh does)",
)


def vllm_repo_cli(*args: str) -> list[str]:
    """The command line of `vllm-repo ARGS` run by this interpreter (so it imports this checkout's package)."""
    return [sys.executable, "-m", "vllm_repo", *args]
