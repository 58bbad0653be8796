"""tune's error: what could not be tuned and what to do (exit 1, printed by the CLI's one handler)."""

from __future__ import annotations

from vllm_repo.errors import VllmRepoError


class TuneError(VllmRepoError):
    """A repository or model tune cannot work on, a load it cannot size, a server that stopped."""
