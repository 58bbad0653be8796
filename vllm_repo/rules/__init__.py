"""The rule registry: every check is a small function registered here with a stable code.

A rule looks at one model directory (scope "model") or at a whole repository (scope "repository") and yields
Findings; the runner stamps each with the rule's code and turns it into a Diagnostic. Codes never change meaning:
VR1xx layout, VR2xx config.pbtxt, VR3xx model.json, VR4xx the model's Hugging Face config, VR5xx across files and
models, VR6xx memory fit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_repo.diagnostics import Severity
from vllm_repo.documents import Position


@dataclass(frozen=True)
class Finding:
    file: Path | None
    message: str
    position: Position | None = None
    hint: str | None = None
    severity: Severity | None = None  # None: the rule's own severity


@dataclass(frozen=True)
class Rule:
    code: str
    name: str
    severity: Severity
    scope: str  # "model" | "repository"
    check: Callable[..., Iterable[Finding]]
    summary: str


RULES: dict[str, Rule] = {}


def rule(code: str, name: str, severity: Severity, scope: str = "model") -> Callable:
    def register(func: Callable[..., Iterable[Finding]]) -> Callable[..., Iterable[Finding]]:
        if code in RULES:
            raise RuntimeError(f"rule code {code} registered twice")
        summary = (func.__doc__ or "").strip().splitlines()[0] if func.__doc__ else name
        RULES[code] = Rule(code, name, severity, scope, func, summary)
        return func

    return register


def all_rules() -> list[Rule]:
    # Importing the modules registers their rules; done once, here, so the file list is the rule list.
    from vllm_repo.rules import config_pbtxt, cross_model, engine_args, hf_config, layout, memory_fit  # noqa: F401

    return [RULES[code] for code in sorted(RULES)]


def did_you_mean(word: str, candidates: Iterable[Any], cutoff: float = 0.75) -> str | None:
    import difflib

    names = [str(c) for c in candidates]
    lowered = {n.lower(): n for n in names}
    if word.lower() in lowered:
        return lowered[word.lower()]
    match = difflib.get_close_matches(word, names, n=1, cutoff=cutoff)
    if not match:
        match = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=cutoff)
        match = [lowered[m] for m in match]
    return match[0] if match else None


def count_text(n: int) -> str:
    """An integer for a message. Products of values from the files (tensor x pipeline parallel size) can outgrow
    what str() converts (4300 digits); those are only ever shown as a power of ten."""
    return str(n) if n.bit_length() < 1000 else f"about 10^{int(n.bit_length() * 0.30103)}"


@dataclass
class CheckContext:
    """What every rule may consult besides the files: the chosen release's EngineArgs and the user's GPU."""

    schema: Any  # EngineArgsSchema
    gpu: Any = None  # estimate.Gpu, when the user named one
    num_gpus: int | None = None
