"""The registry every rule module registers into: Finding (what a check yields), Rule, the @rule decorator, and the
CheckContext a check reads. The rule modules import it, and rules/__init__.py imports the rule modules; this module
imports none of them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vllm_repo.diagnostics.diagnostic import Severity
from vllm_repo.repository.documents import Position

if TYPE_CHECKING:  # the GPU catalog is imported only when a GPU is named, the fixes only when a finding has one
    from vllm_repo.diagnostics.fixes import Fix
    from vllm_repo.estimate.gpus import Gpu
    from vllm_repo.schema.loader import EngineArgsSchema


@dataclass(frozen=True)
class Finding:
    file: Path | None
    message: str
    position: Position | None = None
    hint: str | None = None
    severity: Severity | None = None  # None: the rule's own severity
    fix: Fix | None = None  # where the finding has one right answer


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    scope: str  # "model" | "repository"
    check: Callable[..., Iterable[Finding]]
    doc: str  # the check function's docstring, dedented: vllm_repo.validate.rules.docs reads it

    @property
    def summary(self) -> str:
        return self.doc.splitlines()[0] if self.doc else self.name


RULES: dict[str, Rule] = {}


def rule(code: str, name: str, severity: Severity, scope: str = "model") -> Callable:
    def register(func: Callable[..., Iterable[Finding]]) -> Callable[..., Iterable[Finding]]:
        if code in RULES:
            raise RuntimeError(f"rule code {code} registered twice")
        RULES[code] = Rule(code, name, severity, scope, func, inspect.cleandoc(func.__doc__ or ""))
        return func

    return register


@dataclass
class CheckContext:
    """What every rule may consult besides the files: the chosen release's EngineArgs and the user's GPU."""

    schema: EngineArgsSchema
    gpu: Gpu | None = None  # when the user named one
    num_gpus: int | None = None
