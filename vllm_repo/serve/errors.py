"""The errors of serving: each says what failed and what to do, and carries the exit code launch and infer end
with (vllm_repo.errors)."""

from __future__ import annotations

from pathlib import Path

from vllm_repo.errors import VllmRepoError


class TritonServerError(VllmRepoError):
    """The server could not be set up, started, or did not become ready."""


class TritonLoadHung(TritonServerError):
    """Triton never finished a load its backend had finished (load_hang.py): a restart is the way out."""


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


class TritonUnreachable(InferError):
    """Nothing answers at ``url``: the connection was refused, the name does not resolve, it timed out, or it dropped
    before an answer came (``reason`` says which, in the operating system's words)."""

    def __init__(self, url: str, reason: str, hint: str | None = None):
        super().__init__(
            f"no Triton server answers at {url} ({reason})",
            hint or "start one with `vllm-repo launch REPO`, or give the address it listens on",
        )
        self.url, self.reason = url, reason


class TritonAnswerError(InferError):
    """The server answered with an error: an HTTP status (``status``), or an error event in a stream (``status``
    None). ``server_message`` is its own words, without their JSON or server-sent-event framing."""

    def __init__(self, message: str, hint: str | None = None, *, url: str, status: int | None, server_message: str):
        super().__init__(message, hint)
        self.url, self.status, self.server_message = url, status, server_message
