"""The errors vllm-repo raises on purpose. Each carries what went wrong, what to do about it, and the exit code the
command line ends with; one handler (vllm_repo.cli.handler) prints them. Anything else that escapes a command is a
bug, reported as one (exit 3), never dressed up as a usage error."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_repo.diagnostics.diagnostic import Diagnostic


class VllmRepoError(Exception):
    """A command could not do what was asked: the message says why, the hint what to do (exit 1).

    ``diagnostics`` are validate's findings that explain the refusal (init and launch refuse a tree that does not
    pass validate); the handler prints them before the message."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None, *, diagnostics: Sequence[Diagnostic] = ()):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.diagnostics = list(diagnostics)

    def __str__(self) -> str:
        return self.message


class UsageError(VllmRepoError):
    """What the user gave can't be used: a path that names nothing, an option value out of range, a setting in
    the wrong form (exit 2)."""

    exit_code = 2
