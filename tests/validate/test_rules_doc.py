"""docs/rules.md's rule table is `vllm-repo rules --format markdown`, generated from the rules' own docstrings."""

import re
import subprocess
import sys
from pathlib import Path

RULES_DOC = Path(__file__).resolve().parents[2] / "docs" / "rules.md"


def test_rule_table_is_the_generated_one():
    generated = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "rules", "--format", "markdown"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"<!-- rules table:[^\n]*-->\n(.*?)<!-- end of rules table -->", RULES_DOC.read_text(), re.S)
    assert match, "docs/rules.md lost its rules table markers"
    assert match.group(1) == generated, "docs/rules.md's rule table is stale: paste `vllm-repo rules --format markdown`"


def test_markdown_table_has_one_row_per_rule_in_code_order():
    from vllm_repo.validate.rules import all_rules
    from vllm_repo.validate.rules.docs import rules_table

    rows = rules_table().splitlines()[2:]
    codes = [row.split("|")[1].strip() for row in rows]
    assert codes == [r.code for r in all_rules()] == sorted(codes)
    for row, rule in zip(rows, all_rules(), strict=True):
        assert f"| {rule.severity.value} | {rule.name} |" in row
