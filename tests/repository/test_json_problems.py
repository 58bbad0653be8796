"""JSON syntax errors said the way a person would, at the place to fix (not where the decoder stopped)."""

from __future__ import annotations

import pytest

from vllm_repo.repository.documents import JsonDocument

CASES = [
    # text, what the message says, (line, column) of the place to fix, a word of the hint
    ('{"model": "Qwen/Qwen2.5-0.5B\n}', "string is not closed before the end of its line", (1, 11), "closing"),
    ('{\n  "model": "m",\n  "dtype": "auto",\n}\n', "trailing comma before '}'", (3, 18), "remove the comma"),
    ('{"model": "m", "stop": ["a", "b",]}', "trailing comma before ']'", (1, 33), "remove the comma"),
    ('{"model": "m"\n "dtype": "auto"}', "comma is missing", (1, 14), "add a comma"),
    ("{'model': 'm'}", "single quotes", (1, 2), "double quotes"),
    ('{"model": "m", // the model\n "dtype": "auto"}', "a comment", (1, 16), "no comments"),
    ('{"model": "m"} {"dtype": "auto"}', "more text after the end", (1, 16), "one object"),
    ('{"model": "m", "dtype": "x\ty"}', "control character", (1, 27), "escaped"),
    ('{"model": "m", "dtype": "auto}', "never closed", (1, 25), "closing"),
]


@pytest.mark.parametrize("text, message, place, hint", CASES)
def test_json_syntax_errors_name_the_cause_and_its_place(tmp_path, text, message, place, hint):
    path = tmp_path / "model.json"
    path.write_text(text)
    problem = JsonDocument.load(path).problem
    assert problem is not None and message in problem.message
    assert (problem.position.line, problem.position.column) == place
    assert hint in (problem.hint or "")


def test_an_empty_file_says_so(tmp_path):
    (tmp_path / "model.json").write_text("\n")
    problem = JsonDocument.load(tmp_path / "model.json").problem
    assert "the file is empty" in problem.message and problem.position is None


def test_validate_reports_the_cause_with_its_hint(tmp_path):
    from vllm_repo.validate import validate_paths

    model = tmp_path / "llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "vllm"\n')
    (model / "1" / "model.json").write_text('{\n  "model": "m",\n}\n')
    (d,) = [d for d in validate_paths([model], vllm_version="0.32.0").diagnostics if d.code == "VR301"]
    assert "trailing comma" in d.message and (d.line, d.column) == (2, 15) and "remove the comma" in d.hint
