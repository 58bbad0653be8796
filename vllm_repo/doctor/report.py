"""The doctor's report for people (or as GitHub annotations): for a running server, each model's state first; then
the root cause, with its fix. A client's errors only when asked."""

from __future__ import annotations

import shlex

from vllm_repo.diagnostics.reporters import github_annotation
from vllm_repo.doctor import Diagnosis


def report(diagnosis: Diagnosis, github: bool = False, client_errors: bool = False) -> str:
    if github:
        return "".join(github_annotation(d, hint_label="fix") + "\n" for d in diagnosis.findings)
    out = _models(diagnosis)
    for model, reason in diagnosis.failed_models[:1]:
        out.append(f"model '{model}' failed to load: {reason}")
    for i, d in enumerate(diagnosis.findings):
        label = "root cause" if i == 0 else "then"
        out.append(f"{label}: {d.location()}: [{d.code}] {d.message}")
        out.append(f"    fix: {d.hint}")
    out.extend(f"    {line}" for line in diagnosis.recommendations)
    if not diagnosis.findings and diagnosis.first_errors:
        if diagnosis.failed:
            out.append(f"{diagnosis.source}: no known cause matches this log; its first error lines:")
        else:
            out.append(f"{diagnosis.source}: error lines no known cause explains, none of them stopping a model:")
        out.extend(f"  {e.number}: {e.text}" for e in diagnosis.first_errors)
    elif not diagnosis.findings and diagnosis.index_unanswered:
        out.extend(_why_no_index(diagnosis))
    elif not diagnosis.findings and diagnosis.models is None:
        out.append(f"{diagnosis.source}: no error found")
    elif not diagnosis.findings and not diagnosis.failed_models and diagnosis.failed:
        out.append(f"{diagnosis.source}: no error in it says why a model is not READY")
    if client_errors:
        out.extend(_client_errors(diagnosis))
    return "\n".join(out) + "\n"


def _models(diagnosis: Diagnosis) -> list[str]:
    """A running server's models, as its repository index reports them."""
    if diagnosis.index_unanswered:
        return [f"{diagnosis.server}: live, but its repository index gave no answer: its models' states are unknown"]
    if diagnosis.models is None:
        return []
    if not diagnosis.models:
        return [f"{diagnosis.server}: no model in its repository index"]
    out = [f"{diagnosis.server}: {'its models' if diagnosis.failed else 'healthy'}:"]
    for m in diagnosis.models:
        reason = f": {m.reason}" if m.reason else ""
        out.append(f"  {m.name} (version {m.version or 1}): {m.state or 'no state'}{reason}")
    return out


def _why_no_index(diagnosis: Diagnosis) -> list[str]:
    """A live server whose index does not answer, and nothing found to say why."""
    if diagnosis.source_log is not None and diagnosis.source_log.path is not None:
        return [f"{diagnosis.source}: nothing in it says why the index does not answer"]
    return [
        "no log of the server found on this machine to say why (Triton's index can wait behind a model load that "
        f"hangs): give it, `vllm-repo doctor LOG --url {shlex.quote(diagnosis.server or '')}`"
    ]


def _client_errors(diagnosis: Diagnosis) -> list[str]:
    log = diagnosis.source_log
    if log is None or log.path is None:
        return ["client errors: no server log to read them from"]
    if not diagnosis.client_errors:
        return [f"{diagnosis.source}: no client errors"]
    return [
        "client errors (4xx answers, which vLLM logs at ERROR):",
        *(f"  {diagnosis.source}:{e.number}: {e.text}" for e in diagnosis.client_errors),
    ]
