"""`vllm-repo schema list | show | json-schema` through the real command line app."""

from __future__ import annotations

import json
from pathlib import Path

from jsonschema import Draft202012Validator
from typer.testing import CliRunner

from vllm_repo.cli import build_app
from vllm_repo.schema.loader import bundled_versions, load_schema

runner = CliRunner()
app = build_app(["schema"])
OLDEST, NEWEST = bundled_versions()[0], bundled_versions()[-1]


def _run(*args: str):
    return runner.invoke(app, ["schema", *args])


def test_list_prints_one_release_per_line_oldest_first() -> None:
    result = _run("list")
    assert result.exit_code == 0
    assert result.output.splitlines() == list(bundled_versions())
    long = _run("list", "--long")
    first = long.output.splitlines()[0].split("\t")
    assert first[0] == OLDEST and first[1] == f"{len(load_schema(OLDEST).fields)} keys"


def test_show_prints_type_default_choices_help_and_releases() -> None:
    result = _run("show", "dtype", "--vllm-version", NEWEST)
    assert result.exit_code == 0
    spec = load_schema(NEWEST).fields["dtype"]
    assert f"type:     {' | '.join(spec.types)}" in result.output
    assert f'default:  "{spec.default}"' in result.output
    assert all(f'"{choice}"' in result.output for choice in spec.choices)
    assert spec.help.splitlines()[0] in result.output
    assert f"releases: {OLDEST} to {NEWEST}" in result.output  # dtype exists in every release


def test_show_accepts_the_flag_spelling() -> None:
    assert _run("show", "--", "--max-model-len").output == _run("show", "max_model_len").output


def test_show_of_a_removed_key_explains_and_fails() -> None:
    old = [v for v in bundled_versions() if "disable_log_requests" in load_schema(v).fields]
    result = _run("show", "disable_log_requests", "--vllm-version", NEWEST)
    assert result.exit_code == 1
    assert f"not an engine argument of vLLM {NEWEST}" in result.output
    assert "enable_log_requests" in result.output
    if old:
        assert f"last in {old[-1]}" in result.output


def test_show_of_an_unknown_release_is_a_usage_error() -> None:
    result = _run("show", "dtype", "--vllm-version", "banana")
    assert result.exit_code == 2 and "not a vLLM version" in result.output


def test_json_schema_to_stdout_and_file(tmp_path: Path, monkeypatch) -> None:
    # No release named anywhere (no setting, no serving Python; no vLLM in the test environment): the newest.
    monkeypatch.delenv("VLLM_REPO_SERVING_PYTHON", raising=False)
    monkeypatch.chdir(tmp_path)
    result = _run("json-schema", "--vllm-version", OLDEST)
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    Draft202012Validator.check_schema(document)
    assert set(document["properties"]) == set(load_schema(OLDEST).fields)

    out = tmp_path / "model.schema.json"
    assert _run("json-schema", "--output", str(out)).exit_code == 0
    assert json.loads(out.read_text())["$id"].endswith(NEWEST)
    again = _run("json-schema", "--output", str(out), "--vllm-version", OLDEST)
    assert again.exit_code == 1 and "--force" in again.output
    assert json.loads(out.read_text())["$id"].endswith(NEWEST)
    assert _run("json-schema", "--output", str(out), "--vllm-version", OLDEST, "--force").exit_code == 0
    assert json.loads(out.read_text())["$id"].endswith(OLDEST)
