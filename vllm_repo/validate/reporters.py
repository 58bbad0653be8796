"""Reporters: the same diagnostics as text for people, JSON for tools, or GitHub workflow annotations."""

from __future__ import annotations

import json
from typing import TextIO

from vllm_repo.validate.diagnostics import Severity
from vllm_repo.validate.runner import ValidationResult


def report_text(result: ValidationResult, out: TextIO, err: TextIO) -> None:
    for d in result.diagnostics:
        out.write(d.text() + "\n")
    c = result.counts()
    models = len(result.models)
    err.write(
        f"vllm-repo: {models} model{'s' if models != 1 else ''} checked against vLLM "
        f"{result.vllm_version.schema_version} EngineArgs ({result.vllm_version.reason}): "
        f"{c['error']} error(s), {c['warning']} warning(s), {c['info']} info\n"
    )
    if result.vllm_version.note:
        err.write(f"vllm-repo: note: {result.vllm_version.note}\n")


def report_json(result: ValidationResult, out: TextIO, err: TextIO) -> None:
    payload = {
        "diagnostics": [d.to_dict() for d in result.diagnostics],
        "summary": result.summary(),
    }
    out.write(json.dumps(payload, indent=2) + "\n")


_GITHUB_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def report_github(result: ValidationResult, out: TextIO, err: TextIO) -> None:
    for d in result.diagnostics:
        props = []
        if d.file:
            props.append(f"file={_escape_property(d.file)}")
        if d.line is not None:
            props.append(f"line={d.line}")
            if d.column is not None:
                props.append(f"col={d.column}")
        props.append(f"title={_escape_property(f'vllm-repo {d.code}')}")
        message = d.message + (f" (hint: {d.hint})" if d.hint else "")
        out.write(f"::{_GITHUB_LEVEL[d.severity]} {','.join(props)}::{_escape_data(message)}\n")
    counts = result.counts()
    err.write(
        f"vllm-repo: {counts['error']} error(s), {counts['warning']} warning(s) "
        f"(vLLM {result.vllm_version.schema_version})\n"
    )


REPORTERS = {"text": report_text, "json": report_json, "github": report_github}
