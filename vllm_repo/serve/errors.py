"""The errors of serving: each says what failed and what to do, and carries the exit code launch and infer end
with (vllm_repo.errors)."""

from __future__ import annotations

from pathlib import Path

from vllm_repo.errors import VllmRepoError


class TritonServerError(VllmRepoError):
    """The server could not be set up, started, or did not become ready."""


class LaunchError(VllmRepoError):
    """launch refused or failed. ``diagnostics`` holds validate's findings when the tree is invalid, ``log_path``
    the server's log when the server failed."""

    def __init__(self, message: str, hint: str | None = None, *, diagnostics=(), log_path: Path | None = None):
        super().__init__(message, hint, diagnostics=diagnostics)
        self.log_path = log_path


class DockerError(VllmRepoError):
    """launch --docker could not run the container."""


class InferError(VllmRepoError):
    """No answer from the server, or an error answer: the message is the server's own words where it sent some."""
