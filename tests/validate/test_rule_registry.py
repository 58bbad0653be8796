"""The registry's promises: stable, unique codes; every rule tested and documented."""

import re
from pathlib import Path

from vllm_repo.validate.rules import all_rules

ROOT = Path(__file__).resolve().parents[2]


def test_codes_are_well_formed_and_names_unique():
    rules = all_rules()
    assert all(re.fullmatch(r"VR[1-7]\d\d", r.code) for r in rules)
    assert len({r.name for r in rules}) == len(rules)
    assert all(r.scope in ("model", "repository") for r in rules)


def test_every_rule_has_tests():
    tests = "".join(
        p.read_text() for p in (ROOT / "tests" / "validate").glob("test_*.py") if p.name != Path(__file__).name
    )
    untested = [r.code for r in all_rules() if r.code not in tests]
    assert untested == []


def test_every_rule_is_in_the_rules_doc():
    doc = (ROOT / "docs" / "rules.md").read_text()
    missing = [r.code for r in all_rules() if f"| {r.code} |" not in doc]
    assert missing == []
