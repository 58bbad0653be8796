"""The rule registry: every check is a small function registered here with a stable code.

A rule looks at one model directory (scope "model") or at a whole repository (scope "repository") and yields
Findings; the runner stamps each with the rule's code and turns it into a Diagnostic. Codes never change meaning,
and each family has its module: VR1xx layout (vr1_layout), VR2xx config.pbtxt (vr2_config_pbtxt), VR3xx model.json
(vr3_model_json), VR4xx the model's Hugging Face config (vr4_hf_config), VR5xx across files and models
(vr5_cross_file), VR6xx memory fit (vr6_memory_fit), VR7xx openai.json (vr7_openai_json).

A rule's docstring is its documentation: the first line is the summary `vllm-repo rules` lists (and the table in
docs/rules.md), the rest what `vllm-repo rules CODE` explains, ending with an example that triggers it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_repo.repository.documents import Position
from vllm_repo.validate.diagnostics import Severity


@dataclass(frozen=True)
class Finding:
    file: Path | None
    message: str
    position: Position | None = None
    hint: str | None = None
    severity: Severity | None = None  # None: the rule's own severity
    fix: Any = None  # validate.fixes.Fix, where the finding has one right answer


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


def all_rules() -> list[Rule]:
    # Importing the modules registers their rules; done once, here, so the file list is the rule list.
    from vllm_repo.validate.rules import (  # noqa: F401
        vr1_layout,
        vr2_config_pbtxt,
        vr3_model_json,
        vr4_hf_config,
        vr5_cross_file,
        vr6_memory_fit,
        vr7_openai_json,
    )

    return [RULES[code] for code in sorted(RULES)]


@dataclass
class CheckContext:
    """What every rule may consult besides the files: the chosen release's EngineArgs and the user's GPU."""

    schema: Any  # EngineArgsSchema
    gpu: Any = None  # estimate.Gpu, when the user named one
    num_gpus: int | None = None
