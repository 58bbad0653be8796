"""`vllm-repo doctor`: why a Triton server with the vLLM backend failed, from its log or from the running server.

Every known cause (vllm_repo.doctor.causes) reads the log; what they find becomes Diagnostics (code VDnnn, the log
file and line, the cause in the user's terms, the fix), ordered by where they are in the log: the first is the root
cause, the rest usually its consequences. A log no cause explains is said to be not understood, with its first error
lines. ``launch`` uses the same diagnosis when a server fails to start.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from vllm_repo.doctor.causes import CAUSES, all_causes
from vllm_repo.doctor.log import LogLine, ServerLog, root_error
from vllm_repo.validate.diagnostics import Diagnostic, Severity, display_path

__all__ = ["CAUSES", "Diagnosis", "ServerLog", "diagnose", "diagnose_file", "root_error"]


@dataclasses.dataclass
class Diagnosis:
    source: str  # the log file, or the server's URL
    findings: list[Diagnostic]
    failed_models: list[tuple[str, str]]  # (model, Triton's reason) from "failed to load" lines or the server
    first_errors: list[LogLine]  # for a log no cause explains

    @property
    def understood(self) -> bool:
        return bool(self.findings)

    @property
    def root(self) -> Diagnostic | None:
        return self.findings[0] if self.findings else None

    def summary(self) -> str | None:
        """The root cause in one line, with the model it stopped when there is one, for launch's error message."""
        if self.root is None:
            return None
        model = f"model '{self.failed_models[0][0]}' failed to load: " if self.failed_models else ""
        return f"{model}{self.root.message} [{self.root.code}]"

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "understood": self.understood,
            "findings": [d.to_dict() for d in self.findings],
            "failed_models": [{"model": m, "reason": r} for m, r in self.failed_models],
            "first_errors": [{"line": e.number, "text": e.text} for e in self.first_errors],
        }


def diagnose(log: ServerLog, source: str | None = None) -> Diagnosis:
    """Run every cause over ``log``."""
    shown = source or (display_path(log.path) if log.path else "<log>")
    found: dict[tuple[str, str], Diagnostic] = {}
    for cause in all_causes():
        for f in cause.check(log):
            key = (cause.code, f.message)
            if key not in found:
                found[key] = Diagnostic(
                    code=cause.code,
                    severity=Severity.ERROR,
                    file=shown,
                    line=f.line.number,
                    message=f.message,
                    hint=f.hint,
                )
    findings = sorted(found.values(), key=lambda d: (d.line or 0, d.code))
    failed = [(model, reason) for _, model, reason in log.failed_loads()]
    return Diagnosis(shown, findings, failed, [] if findings else log.error_lines())


def diagnose_file(path: str | Path) -> Diagnosis:
    return diagnose(ServerLog.read(path))


def diagnose_server(url: str, log: str | Path | None = None) -> Diagnosis:
    """A running server: the models its repository index reports unavailable, with their reasons, and the log (given,
    or found for a server on this machine) when there is one."""
    from vllm_repo.doctor.server import index_as_log, local_log_of, repository_index

    models = repository_index(url)
    from_index = diagnose(ServerLog(index_as_log(models)), source=f"{url} (repository index)")
    path = Path(log) if log else local_log_of(url)
    if path is None:
        return from_index
    from_log = diagnose_file(path)
    # The log has line numbers and what led up to a failure; the index adds the models' states.
    return from_log if from_log.understood or not from_index.understood else from_index
