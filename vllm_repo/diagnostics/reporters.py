"""Reporters: the same findings as text for people, JSON for tools, or GitHub workflow annotations.

A reporter prints what a command found (``Findings``: the diagnostics, and what the command says about them as a
whole); the annotation's escaping is here alone, so that no command writes a message GitHub would cut at a newline
or a file name it would split at a comma."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TextIO

from vllm_repo.diagnostics.diagnostic import Diagnostic, Severity


class Findings(Protocol):
    """What a command found, as its reporters print it."""

    @property
    def diagnostics(self) -> Sequence[Diagnostic]: ...

    def summary(self) -> dict[str, Any]:
        """The JSON report's "summary" object."""
        ...

    def summary_lines(self, brief: bool) -> list[str]:
        """The lines on stderr after the findings (``brief`` for the GitHub annotations' run log)."""
        ...


def report_text(findings: Findings, out: TextIO, err: TextIO) -> None:
    for d in findings.diagnostics:
        out.write(d.text() + "\n")
    err.writelines(line + "\n" for line in findings.summary_lines(brief=False))


def report_json(findings: Findings, out: TextIO, err: TextIO) -> None:
    payload = {"diagnostics": [d.to_dict() for d in findings.diagnostics], "summary": findings.summary()}
    out.write(json.dumps(payload, indent=2) + "\n")


def report_github(findings: Findings, out: TextIO, err: TextIO) -> None:
    out.writelines(github_annotation(d) + "\n" for d in findings.diagnostics)
    err.writelines(line + "\n" for line in findings.summary_lines(brief=True))


REPORTERS: dict[str, Callable[[Findings, TextIO, TextIO], None]] = {
    "text": report_text,
    "json": report_json,
    "github": report_github,
}

_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def github_annotation(d: Diagnostic, hint_label: str = "hint") -> str:
    """One workflow command (``::error file=F,line=L,col=C,title=T::message (hint: ...)``), its properties and
    message escaped as GitHub's toolkit escapes them."""
    props = []
    if d.file:
        props.append(f"file={_escape_property(d.file)}")
    if d.line is not None:
        props.append(f"line={d.line}")
        if d.column is not None:
            props.append(f"col={d.column}")
    props.append(f"title={_escape_property(f'vllm-repo {d.code}')}")
    message = d.message + (f" ({hint_label}: {d.hint})" if d.hint else "")
    return f"::{_GITHUB_LEVEL[d.severity]} {','.join(props)}::{_escape_data(message)}"


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")
