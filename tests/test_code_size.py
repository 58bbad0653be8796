"""The package's size limits (CONTRIBUTING.md, "Size"): no module over 600 lines, no function over 80, a command's
options in its signature aside."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "vllm_repo"
MODULE_LINES = 600
FUNCTION_LINES = 80


def function_lengths(path: Path) -> list[tuple[str, int, int]]:
    """Each function's name, its length, and its body's (from its first statement, docstring included)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            end = node.end_lineno or node.lineno
            found.append((node.name, end - node.lineno + 1, end - node.body[0].lineno + 1))
    return found


def test_no_module_is_over_600_lines():
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MODULE_LINES
    }
    assert long == {}


def test_no_function_is_over_80_lines_but_the_commands_whose_options_make_their_signature_long():
    too_long, long_signatures = [], []
    for path in PACKAGE.rglob("*.py"):
        for name, length, body in function_lengths(path):
            where = f"{path.relative_to(PACKAGE)}:{name}"
            if body > FUNCTION_LINES:
                too_long.append((where, body))
            elif length > FUNCTION_LINES:
                long_signatures.append(where)
    assert too_long == []
    # Only the CLI's commands may have more than 80 lines of options.
    assert all(where.startswith("cli/") for where in long_signatures), long_signatures


def test_the_measure_counts_a_signature_apart_from_the_body(tmp_path):
    source = tmp_path / "m.py"
    options = "".join(f"    option_{i}: int = {i},\n" for i in range(90))
    source.write_text(f"def command(\n{options}) -> None:\n    '''Doc.'''\n    return None\n")
    assert function_lengths(source) == [("command", 94, 2)]
