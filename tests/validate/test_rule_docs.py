"""Every rule's documentation (its docstring, read by vllm_repo.validate.rules.docs): a summary, an explanation, and
an example repository that really makes the rule report.

How an example is run: its files are written into tmp_path (the example root; a path ending in "/" is an empty
directory), tmp_path becomes the working directory (relative "model" paths in model.json resolve against it, as
they do for vLLM), and validate checks the example root, or its model_repository/ folder when the example has
one: the VR4xx/VR6xx examples keep the model's config.json in models/, beside the repository rather than in it.
Only the rule under test is selected, so other rules the example happens to trip don't matter.
"""

from __future__ import annotations

import pytest

from tests.support.rule_examples import OPTIONS, VERSION, write_example
from vllm_repo.errors import UsageError
from vllm_repo.validate import validate_paths
from vllm_repo.validate.rules import Rule, all_rules
from vllm_repo.validate.rules.docs import explain, find_rule, rule_doc

# Rules whose example cannot make them report from files alone: code -> why. Empty: every example is proven.
EXCEPTIONS: dict[str, str] = {}

RULES = all_rules()


def _code(rule: Rule) -> str:
    return rule.code


@pytest.mark.parametrize("rule", RULES, ids=_code)
def test_example_triggers_its_rule(rule, tmp_path, monkeypatch):
    example = rule_doc(rule).example
    assert example, f"{rule.code}'s docstring has no Example:: block with '# <path>' files"
    target = write_example(tmp_path, example)
    monkeypatch.chdir(tmp_path)
    options = OPTIONS.get(rule.code[:3], {})
    result = validate_paths([target], vllm_version=VERSION, select=[rule.code], **options)
    reported = [d for d in result.diagnostics if d.code == rule.code]
    if rule.code in EXCEPTIONS:
        assert not reported, f"{rule.code}'s example now triggers it: remove it from EXCEPTIONS"
        pytest.skip(f"{rule.code}: {EXCEPTIONS[rule.code]}")
    assert reported, f"{rule.code}'s example does not trigger it; validate reported {result.diagnostics}"
    # The example shows the rule's main finding, not only one of its milder variants.
    assert rule.severity in {d.severity for d in reported}, [(d.severity.value, d.message) for d in reported]


@pytest.mark.parametrize("family", sorted(OPTIONS))
def test_options_an_example_needs_are_in_its_docs(family):
    rules = [r for r in RULES if r.code.startswith(family)]
    assert rules
    for rule in rules:
        for option, value in OPTIONS[family].items():
            assert f"--{option} {value}" in rule_doc(rule).details, f"{rule.code}'s docs don't say --{option} {value}"


@pytest.mark.parametrize("rule", RULES, ids=_code)
def test_docs_have_a_summary_and_explain_shows_it_with_the_example(rule):
    doc = rule_doc(rule)
    summary = rule.doc.splitlines()[0] if rule.doc else ""
    assert summary.strip() and summary == rule.summary, f"{rule.code} has no summary line"
    assert doc.details, f"{rule.code}'s docs explain nothing beyond the summary"
    assert summary not in doc.details and "Example::" not in doc.details
    text = explain(rule.code)
    assert rule.code in text and rule.name in text and summary in text and doc.details in text
    assert doc.example and all(path in text for path in doc.example)
    assert explain(rule.code.lower()) == text and explain(rule.name) == text


@pytest.mark.parametrize("rule", RULES, ids=_code)
def test_unknown_code_suggests_the_near_miss(rule):
    typos = [rule.code.replace("0", "O", 1), rule.code.lower() + "x"]
    for typo in typos:
        assert typo.upper() != rule.code
        with pytest.raises(UsageError) as raised:
            explain(typo)
        assert typo in raised.value.message
        assert raised.value.hint == f"did you mean {rule.code}?"


def test_misspelled_rule_name_suggests_the_name():
    rule = find_rule("VR304")
    typo = rule.name[:-1]
    with pytest.raises(UsageError) as raised:
        explain(typo)
    assert raised.value.hint == f"did you mean {rule.name}?"
