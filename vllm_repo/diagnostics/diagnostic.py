"""The one result type every check produces (validate's rules, doctor's causes, export's findings, init's and
launch's refusals) and every reporter consumes.

A plain frozen dataclass rather than a pydantic model: validate runs in pre-commit on every commit, and importing
pydantic would be about a third of its start-up."""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:  # only the annotation needs it: diagnostics stays a leaf module that every check imports
    from vllm_repo.diagnostics.fixes import Fix


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 2, "warning": 1, "info": 0}[self.value]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Diagnostic:
    """One finding: a stable rule code, where it is (1-based line/column, None where there is no single place),
    what is wrong and what to do about it."""

    code: str
    severity: Severity
    file: str | None
    line: int | None = None
    column: int | None = None
    message: str
    hint: str | None = None
    fix: Fix | None = dataclasses.field(default=None, compare=False)  # what --fix would do

    def sort_key(self) -> tuple[str, int, int, str, str]:
        return (self.file or "", self.line or 0, self.column or 0, self.code, self.message)

    def escalated(self) -> Diagnostic:
        """The same finding as an error (``--strict`` turns warnings into errors)."""
        if self.severity is Severity.WARNING:
            return dataclasses.replace(self, severity=Severity.ERROR)
        return self

    def location(self) -> str:
        """``file:line:column`` as compilers and editors write it (``<repository>`` for a repository-wide finding)."""
        parts = [self.file or "<repository>"]
        if self.line is not None:
            parts.append(str(self.line))
            if self.column is not None:
                parts.append(str(self.column))
        return ":".join(parts)

    def text(self) -> str:
        """The finding as validate's text report prints it: location, severity, code and message, then the hint."""
        line = f"{self.location()}: {self.severity.value}[{self.code}] {self.message}"
        return line + (f"\n    hint: {self.hint}" if self.hint else "")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (validate --format json)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {**fields, "severity": self.severity.value, "fix": self.fix.description if self.fix else None}


def count_by_severity(diagnostics: Iterable[Diagnostic]) -> dict[str, int]:
    """How many findings of each severity, every severity named (``{"error": 0, "warning": 2, "info": 0}``)."""
    counts = {s.value: 0 for s in Severity}
    for d in diagnostics:
        counts[d.severity.value] += 1
    return counts


@overload
def display_path(path: Path | str, base: Path | None = None) -> str: ...
@overload
def display_path(path: None, base: Path | None = None) -> None: ...
@overload
def display_path(path: Path | str | None, base: Path | None = None) -> str | None: ...
def display_path(path: Path | str | None, base: Path | None = None) -> str | None:
    """Paths in diagnostics are relative to the working directory when they can be, as editors and CI expect.
    Symlinks are not followed: a finding names the path the user gave, not where a link points."""
    if path is None:
        return None
    p = Path(os.path.abspath(path))
    try:
        return str(p.relative_to(os.path.abspath(base or Path.cwd())))
    except (ValueError, OSError):  # outside base, or the working directory is gone
        return str(p)
