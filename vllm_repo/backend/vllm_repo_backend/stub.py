"""Triton's Python stub's own module, ``triton_python_backend_utils``: requests, responses, tensors, the logger and
metric families. It exists only inside the stub; elsewhere (vllm-repo's tests) ``pb_utils`` is None, and the parts of
the backend that do not talk to Triton are importable and testable without it."""

from __future__ import annotations

from typing import Any

pb_utils: Any  # the stub's module (it has no types), or None
try:
    import triton_python_backend_utils

    pb_utils = triton_python_backend_utils
except ImportError:  # pragma: no cover - exercised by the unit tests' import
    pb_utils = None
