"""bench/ is a package run as `python -m bench.NAME`: every command the docs and the device scripts give names a
module that is there, no script is run by its path, and no script reaches into tests/ or edits sys.path."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
PAGES = [
    ROOT / "README.md",
    ROOT / "CONTRIBUTING.md",
    BENCH / "README.md",
    BENCH / "h200_calibration.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((BENCH / "results").glob("*.md")),
    *sorted(BENCH.glob("*.sh")),
]
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.name != "__init__.py")
MODULE_COMMAND = re.compile(r"-m bench\.([a-z_]+)")  # NAME, a placeholder, is left alone
PATH_COMMAND = re.compile(r"(?:python[\d.]*|\$\{?\w*PY\w*\}?\"?) +\"?\S*bench/\w+\.py")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_bench_command_names_a_module_and_none_runs_a_script_by_its_path(page):
    text = page.read_text()
    for name in MODULE_COMMAND.findall(text):
        assert (BENCH / f"{name}.py").is_file(), f"{page.name}: python -m bench.{name}: no such module"
    assert PATH_COMMAND.findall(text) == []


def test_the_docs_run_the_benchmarks_as_modules():
    found = {name for page in PAGES for name in MODULE_COMMAND.findall(page.read_text())}
    assert {"backend_throughput", "backend_faults", "native_hops", "openai_hops", "validate_speed"} <= found


@pytest.mark.parametrize("script", SCRIPTS + sorted((BENCH / "lib").glob("*.py")), ids=lambda p: p.name)
def test_no_bench_module_edits_sys_path_or_imports_the_tests(script):
    tree = ast.parse(script.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert not node.module.startswith("tests"), f"{script.name} imports {node.module}"
        if isinstance(node, ast.Import):
            assert not any(alias.name.startswith("tests") for alias in node.names), script.name
        if isinstance(node, ast.Attribute) and node.attr == "path":
            assert not (isinstance(node.value, ast.Name) and node.value.id == "sys"), f"{script.name} uses sys.path"


@pytest.mark.parametrize("name", ["backend_throughput", "backend_faults", "native_hops", "openai_hops"])
def test_a_script_answers_help_as_a_module_from_the_repository_root(name):
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{name}", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
