"""The serving environment the end-to-end tests need (built by .ci/setup-serving.sh; scripts/test.sh exports it)."""

import os

import pytest

SERVING_PYTHON = os.environ.get("VLLM_REPO_SERVING_PYTHON")
TRITON_HOME = os.environ.get("VLLM_REPO_TRITON_HOME")
SERVING_SKIP_REASON = (
    "needs a real Triton server and vLLM: set VLLM_REPO_SERVING_PYTHON and VLLM_REPO_TRITON_HOME to the lines printed "
    "by `bash .ci/setup-serving.sh` (`eval \"$(bash .ci/setup-serving.sh | sed 's/^/export /')\"`; scripts/test.sh "
    "does it)"
)
needs_serving = pytest.mark.skipif(not (SERVING_PYTHON and TRITON_HOME), reason=SERVING_SKIP_REASON)
