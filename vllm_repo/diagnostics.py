"""The one result type every check produces and every reporter consumes."""

from __future__ import annotations

import enum
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 2, "warning": 1, "info": 0}[self.value]


class Diagnostic(BaseModel):
    """One finding: a stable rule code, where it is (1-based line/column, None where there is no single place),
    what is wrong and what to do about it."""

    model_config = ConfigDict(frozen=True)

    code: str
    severity: Severity
    file: str | None
    line: int | None = None
    column: int | None = None
    message: str
    hint: str | None = None

    def sort_key(self) -> tuple:
        return (self.file or "", self.line or 0, self.column or 0, self.code, self.message)

    def escalated(self) -> "Diagnostic":
        """The same finding as an error (``--strict`` turns warnings into errors)."""
        if self.severity is Severity.WARNING:
            return self.model_copy(update={"severity": Severity.ERROR})
        return self


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
