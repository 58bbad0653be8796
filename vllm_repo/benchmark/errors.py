"""bench's error: what could not be measured and what to do (exit 1, printed by the CLI's one handler)."""

from __future__ import annotations

from vllm_repo.errors import VllmRepoError


class BenchError(VllmRepoError):
    """No server to measure, a model it does not serve, a dataset that cannot be read."""
