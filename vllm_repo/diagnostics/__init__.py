"""Findings, the one result type every check of vllm-repo produces (validate's rules, doctor's causes, export's and
init's and launch's refusals): diagnostic.py (`Diagnostic`, `Severity`), reporters.py (text for people, JSON for
tools, GitHub workflow annotations, escaped in one place) and fixes.py (the edits a finding's fix makes to a file,
planned and applied by `FixPlan`, which validate --fix, upgrade, tune and plan write through).

Kept free of pydantic, grpc and HTTP clients: validate runs in pre-commit and imports it on every commit."""

from vllm_repo.diagnostics.diagnostic import Diagnostic, Severity, count_by_severity, display_path

__all__ = ["Diagnostic", "Severity", "count_by_severity", "display_path"]
