"""The doctor's report for people (or as GitHub annotations): the root cause first, with its fix."""

from __future__ import annotations

from vllm_repo.doctor import Diagnosis


def report(diagnosis: Diagnosis, github: bool = False) -> str:
    if github:
        return "".join(
            f"::error file={d.file},line={d.line},title=vllm-repo {d.code}::{d.message} (fix: {d.hint})\n"
            for d in diagnosis.findings
        )
    out = []
    for model, reason in diagnosis.failed_models[:1]:
        out.append(f"model '{model}' failed to load: {reason}")
    for i, d in enumerate(diagnosis.findings):
        label = "root cause" if i == 0 else "then"
        out.append(f"{label}: {d.location()}: [{d.code}] {d.message}")
        out.append(f"    fix: {d.hint}")
    out.extend(f"    {line}" for line in diagnosis.recommendations)
    if not diagnosis.findings:
        if diagnosis.first_errors:
            out.append(f"{diagnosis.source}: no known cause matches this log; its first error lines:")
            out.extend(f"  {e.number}: {e.text}" for e in diagnosis.first_errors)
        else:
            out.append(f"{diagnosis.source}: no error found")
    return "\n".join(out) + "\n"
