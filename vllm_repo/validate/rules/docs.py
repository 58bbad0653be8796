"""The rules' documentation, read from their own docstrings: the list `vllm-repo rules` prints, the table in
docs/rules.md (`vllm-repo rules --format markdown`), and one rule explained (`vllm-repo rules VR304`).

A docstring reads: the summary line; paragraphs on why it matters; then ``Example::`` and an indented block with the
files of a repository that triggers the rule, each file introduced by a ``# <path>`` line (a path ending in ``/``
is an empty directory). Tests build every example and check that it triggers its rule.
"""

from __future__ import annotations

import dataclasses
import re

from vllm_repo.errors import UsageError
from vllm_repo.validate.rules import Rule, all_rules
from vllm_repo.validate.rules.common import did_you_mean

EXAMPLE_MARKER = "Example::"
_FILE_HEADER = re.compile(r"^# (\S+)$")
FAMILIES = {
    "VR1": "the repository's layout",
    "VR2": "config.pbtxt",
    "VR3": "model.json",
    "VR4": "the model's own config.json (checked when it is reachable offline: a local model directory or the local "
    "Hugging Face cache)",
    "VR5": "across files and models",
    "VR6": "memory fit (with --gpu, or gpu in [tool.vllm-repo])",
}


@dataclasses.dataclass(frozen=True)
class RuleDoc:
    rule: Rule
    details: str  # the paragraphs between the summary and the example
    example: dict[str, str]  # path in the repository -> file text ("" and a trailing "/" for a directory)


def rule_doc(rule: Rule) -> RuleDoc:
    body = rule.doc.split("\n", 1)[1] if "\n" in rule.doc else ""
    prose, _, example = body.partition(EXAMPLE_MARKER)
    return RuleDoc(rule, prose.strip(), parse_example(example))


def parse_example(block: str) -> dict[str, str]:
    files: dict[str, list[str]] = {}
    current = None
    for raw in block.splitlines():
        line = raw[4:] if raw.startswith("    ") else raw.strip()
        header = _FILE_HEADER.match(line)
        if header:
            current = header.group(1)
            files[current] = []
        elif current is not None:
            files[current].append(line)
    return {path: "\n".join(lines).strip("\n") + ("\n" if any(lines) else "") for path, lines in files.items()}


def find_rule(code: str) -> Rule:
    rules = {r.code: r for r in all_rules()}
    wanted = code.strip().upper()
    if wanted in rules:
        return rules[wanted]
    by_name = {r.name: r for r in rules.values()}
    if code.strip().lower() in by_name:
        return by_name[code.strip().lower()]
    # Letters typed for the digits they look like (VR3O4) first; then the closest spelling.
    lookalike = wanted[:2] + wanted[2:].translate(str.maketrans("OILS", "0115"))
    near = (lookalike if lookalike in rules else None) or did_you_mean(wanted, rules, cutoff=0.75)
    near = near or did_you_mean(code.strip().lower(), by_name, cutoff=0.6)
    raise UsageError(f"no rule {code!r}", hint=f"did you mean {near}?" if near else "`vllm-repo rules` lists them")


def rules_text() -> str:
    return "".join(f"{r.code}  {r.severity.value:<7}  {r.name:<24}  {r.summary}\n" for r in all_rules())


def rules_table() -> str:
    """docs/rules.md's rule table, one row per rule, grouped under the code families."""
    lines = ["| code | severity | name | what it checks |", "|---|---|---|---|"]
    lines += [f"| {r.code} | {r.severity.value} | {r.name} | {_cell(r.summary)} |" for r in all_rules()]
    return "\n".join(lines) + "\n"


def explain(code: str) -> str:
    doc = rule_doc(find_rule(code))
    rule = doc.rule
    family = FAMILIES.get(rule.code[:3], "")
    lines = [f"{rule.code} {rule.name} ({rule.severity.value} by default; {family})", "", rule.summary]
    if doc.details:
        lines += ["", doc.details]
    if doc.example:
        lines += ["", "Example, a repository it reports:"]
        for path, text in doc.example.items():
            lines.append(f"  {path}")
            lines += [f"    {line}".rstrip() for line in text.splitlines()]
    lines += ["", f"Skip it with --ignore {rule.code}; run it alone with --select {rule.code}."]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
