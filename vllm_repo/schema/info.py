"""What `vllm-repo schema show` and `schema list` print: one engine argument, or the bundled releases."""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from vllm_repo.schema import history as key_history
from vllm_repo.schema.loader import VersionChoice, bundled_versions, choose_schema_version, load_schema


@dataclass
class KeyReport:
    name: str
    choice: VersionChoice
    found: bool
    types: list[str] = field(default_factory=list)
    default: Any = None
    default_repr: str | None = None
    choices: list[Any] | None = None
    help: str | None = None
    flag: str | None = None
    deprecated: bool = False
    deprecation: str | None = None
    releases: str = ""
    history: str | None = None  # why the key is missing from the chosen release
    suggestions: list[Any] = field(default_factory=list)  # close names (missing key) or documented values


def describe_key(name: str, vllm_version: str | None = None) -> KeyReport:
    choice = choose_schema_version(vllm_version)
    schema = load_schema(choice.schema_version)
    spec = schema.get(name)
    report = KeyReport(name=name, choice=choice, found=spec is not None, releases=key_history.describe_releases(name))
    if spec is None:
        report.history = key_history.explain_missing_key(name, choice.schema_version)
        report.suggestions = difflib.get_close_matches(name, list(schema.fields), n=3, cutoff=0.7)
        return report
    raw = _raw_field(choice.schema_version, name)
    report.types = list(spec.types)
    report.default = spec.default
    report.default_repr = raw.get("default_repr")
    report.suggestions = list(raw.get("suggestions") or [])
    report.choices = spec.choices
    report.help = spec.help
    report.flag = spec.flag
    report.deprecated = spec.deprecated
    report.deprecation = key_history.explain_deprecated_key(name, choice.schema_version)
    return report


def _raw_field(version: str, name: str) -> dict[str, Any]:
    # Optional keys (default_repr, suggestions) are not part of the loader's model: read them from the file.
    from vllm_repo.schema.json_schema import raw_fields

    return raw_fields(version).get(name, {})


def format_key_report(report: KeyReport) -> str:
    lines = [f"{report.name}  (vLLM {report.choice.schema_version}: {report.choice.reason})"]
    if not report.found:
        lines.append(f"  not an engine argument of vLLM {report.choice.schema_version}")
        if report.history:
            lines.append(f"  {report.history}")
        if report.suggestions:
            lines.append("  did you mean: " + ", ".join(report.suggestions))
        lines.append(f"  releases: {report.releases}")
        return "\n".join(lines)
    default = json.dumps(report.default)
    if report.default_repr:
        default = (
            f"{report.default_repr} (built by vLLM; write an object to override)"
            if report.default is None
            else f"{default} ({report.default_repr})"
        )
    lines.append(f"  type:     {' | '.join(report.types)}")
    lines.append(f"  default:  {default}")
    if report.choices:
        lines.append("  choices:  " + ", ".join(json.dumps(c) for c in report.choices))
    elif report.suggestions:
        lines.append("  values:   " + ", ".join(json.dumps(c) for c in report.suggestions) + " (or any string)")
    if report.flag:
        lines.append(f"  flag:     {report.flag}")
    if report.deprecated:
        lines.append(f"  deprecated: {report.deprecation or 'yes'}")
    lines.append(f"  releases: {report.releases}")
    if report.help:
        lines.append("  help:")
        lines.extend("    " + line if line else "" for line in report.help.splitlines())
    return "\n".join(lines)


def release_lines(long: bool = False) -> list[str]:
    """The bundled releases, oldest first; with ``long``, how each was produced and its key count."""
    if not long:
        return list(bundled_versions())
    out = []
    for version in bundled_versions():
        schema = load_schema(version)
        out.append(f"{version}\t{len(schema.fields)} keys\t{schema.source}")
    return out
