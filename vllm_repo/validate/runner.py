"""The runner: the project's settings, the release's EngineArgs, every enabled rule over every selected model,
and the findings stamped into Diagnostics, deduplicated and in order; and validate --fix (fix_paths), which applies
the fixes the findings carry and validates again."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

from vllm_repo.diagnostics.diagnostic import Diagnostic, Severity, count_by_severity, display_path
from vllm_repo.diagnostics.fixes import FixPlan, plan
from vllm_repo.errors import UsageError
from vllm_repo.repository import ModelRepository, discover
from vllm_repo.schema.loader import VersionChoice, choose_schema_version, load_schema
from vllm_repo.settings import resolve_settings
from vllm_repo.validate.rules import CheckContext, Finding, Rule, all_rules


@dataclasses.dataclass
class ValidationResult:
    diagnostics: list[Diagnostic]
    vllm_version: VersionChoice
    models: list[str]

    @property
    def has_errors(self) -> bool:
        return any(d.severity is Severity.ERROR for d in self.diagnostics)

    def counts(self) -> dict[str, int]:
        return count_by_severity(self.diagnostics)

    def summary(self) -> dict[str, Any]:
        return {
            **self.counts(),
            "models": len(self.models),
            "vllm_version": self.vllm_version.schema_version,
            "vllm_version_reason": self.vllm_version.reason,
            "vllm_version_note": self.vllm_version.note,
        }

    def summary_lines(self, brief: bool) -> list[str]:
        c = self.counts()
        if brief:
            return [
                f"vllm-repo: {c['error']} error(s), {c['warning']} warning(s) (vLLM {self.vllm_version.schema_version})"
            ]
        models = len(self.models)
        lines = [
            f"vllm-repo: {models} model{'s' if models != 1 else ''} checked against vLLM "
            f"{self.vllm_version.schema_version} EngineArgs ({self.vllm_version.reason}): "
            f"{c['error']} error(s), {c['warning']} warning(s), {c['info']} info"
        ]
        if self.vllm_version.note:
            lines.append(f"vllm-repo: note: {self.vllm_version.note}")
        return lines


def validate_paths(
    paths: Sequence[str | Path],
    *,
    vllm_version: str | None = None,
    strict: bool = False,
    gpu: str | None = None,
    num_gpus: int | None = None,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    vllm_version_origin: str | None = None,
    loaded: Collection[str] | None = None,
) -> ValidationResult:
    """Check model repositories, model directories or single files.

    ``loaded``: the names of the only models the server will load (Triton's explicit model control); the
    repositories' other models are left out, as if they were not there, checks across models included.

    gpu and num_gpus default to the project's [tool.vllm-repo] settings (pyproject.toml or .vllm-repo.toml above the
    first path); the release is the one every command checks against (schema.loader.target_vllm_version), and
    ``vllm_version_origin`` says where a given ``vllm_version`` came from when it is not --vllm-version. Raises
    UsageError (PathError, SettingsError, UnknownGpuError) for paths that name nothing to check, an unknown
    release, rule code or GPU, and unusable settings."""
    start = Path(paths[0]) if paths else None
    settings = resolve_settings(start, gpu=gpu, num_gpus=num_gpus)
    target_gpu = None
    if settings.gpu_spec is not None:
        from vllm_repo.estimate import resolve_gpu

        target_gpu = resolve_gpu(settings.gpu_spec)  # an unknown GPU name is a usage error, raised before any check
    choice = choose_schema_version(vllm_version, start=start, origin=vllm_version_origin, settings=settings)
    context = CheckContext(schema=load_schema(choice.schema_version), gpu=target_gpu, num_gpus=settings.num_gpus)
    repositories = discover([Path(p) for p in paths])
    if loaded is not None:
        repositories = [_only(repo, loaded) for repo in repositories]
    _check_codes(select, "--select")
    _check_codes(ignore, "--ignore")
    rules = [r for r in all_rules() if _enabled(r.code, select, ignore)]
    diagnostics: list[Diagnostic] = []
    models: list[str] = []
    for repo in repositories:
        models.extend(display_path(m.path) for m in repo.selected)
        diagnostics.extend(_run(repo, rules, context))
    if strict:
        diagnostics = [d.escalated() for d in diagnostics]
    unique = {(d.code, d.file, d.line, d.column, d.message): d for d in diagnostics}
    ordered = sorted(unique.values(), key=Diagnostic.sort_key)
    return ValidationResult(diagnostics=ordered, vllm_version=choice, models=models)


# validate --fix runs again on what it wrote until nothing changes (a file moved to its right name is read, and
# checked, only then); a run that still changes something after this many passes stops, and says so.
MAX_FIX_PASSES = 10


def fix_paths(
    paths: Iterable[str | Path], *, write: bool = True, **options: Any
) -> tuple[FixPlan[Diagnostic], ValidationResult]:
    """validate ``paths``, apply the fixes its findings carry, and validate again, until no fix changes anything (at
    most MAX_FIX_PASSES); return every pass's fixes in one plan (``passes``, ``converged``; ``skipped``: what the last
    pass could not fix) with what validate finds afterwards. Without ``write``, one pass is planned and nothing
    written (a diff). ``options`` are validate_paths'."""
    paths = list(paths)
    result = validate_paths(paths, **options)
    total: FixPlan[Diagnostic] = FixPlan()
    for _ in range(MAX_FIX_PASSES if write else 1):
        fixes = plan((d, d.fix) for d in result.diagnostics if d.fix is not None)
        total.skipped = fixes.skipped
        if not fixes.changes:
            total.converged = True
            break
        total.passes += 1
        total.applied.extend(fixes.applied)
        total.moves.extend(fixes.moves)
        for path, (old, new) in fixes.texts.items():
            total.texts[path] = (total.texts.get(path, (old, new))[0], new)
        if not write:
            return total, result
        fixes.write()
        result = validate_paths(paths, **options)
    return total, result


def _only(repository: ModelRepository, names: Collection[str]) -> ModelRepository:
    return dataclasses.replace(
        repository,
        models=[m for m in repository.models if m.name in names],
        selected=[m for m in repository.selected if m.name in names],
    )


def _check_codes(prefixes: Sequence[str] | None, option: str) -> None:
    """A prefix that matches no rule is a typo that would silently check nothing (or skip nothing)."""
    codes = [r.code for r in all_rules()]
    for prefix in prefixes or ():
        if not any(code.startswith(prefix) for code in codes):
            families = sorted({code[:3] for code in codes})
            raise UsageError(
                f"{option} {prefix}: no rule code starts with it",
                hint=f"codes are {', '.join(families)} followed by two digits (`vllm-repo rules` lists them)",
            )


def _enabled(code: str, select: Sequence[str] | None, ignore: Sequence[str] | None) -> bool:
    if select and not any(code.startswith(s) for s in select):
        return False
    return not (ignore and any(code.startswith(i) for i in ignore))


def _run(repo: ModelRepository, rules: list[Rule], context: CheckContext) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for rule in rules:
        if rule.scope == "repository":
            out.extend(_stamp(rule, f) for f in rule.check(repo, context))
        else:
            for model in repo.selected:
                out.extend(_stamp(rule, f) for f in rule.check(model, context))
    return out


def _stamp(rule: Rule, finding: Finding) -> Diagnostic:
    position = finding.position
    return Diagnostic(
        code=rule.code,
        severity=finding.severity or rule.severity,
        file=display_path(finding.file),
        line=position.line if position else None,
        column=position.column if position else None,
        message=finding.message,
        hint=finding.hint,
        fix=finding.fix,
    )
