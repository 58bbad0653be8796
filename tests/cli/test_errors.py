"""One error model: deliberate errors print message and hint with their exit code; a bug says it is one (exit 3)
and where its traceback went, and is never reported as a usage error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vllm_repo.cli import build_app
from vllm_repo.cli.handler import BUG_EXIT_CODE, DEBUG_ENV
from vllm_repo.errors import UsageError, VllmRepoError

runner = CliRunner()


def cli(*args: str, cwd: Path | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vllm_repo", *args], capture_output=True, text=True, cwd=cwd, env=env)


def test_a_usage_error_exits_2_with_its_hint(tmp_path):
    (tmp_path / "file").write_text("x")
    done = cli("backend", "install", str(tmp_path / "file"))
    assert done.returncode == UsageError.exit_code == 2
    assert f"error: {tmp_path / 'file'} is not a directory" in done.stderr
    assert "hint: give a Triton backend directory" in done.stderr and "Traceback" not in done.stderr


def test_a_refusal_exits_1_with_its_hint(tmp_path):
    out = tmp_path / "schema.json"
    out.write_text("{}")
    done = cli("schema", "json-schema", "--output", str(out))
    assert done.returncode == VllmRepoError.exit_code == 1
    assert "exists" in done.stderr and "hint: pass --force" in done.stderr
    assert out.read_text() == "{}"


def test_the_same_usage_error_reads_the_same_from_every_command(tmp_path):
    for args in (
        ("validate", "--vllm-version", "banana", str(tmp_path)),
        ("schema", "show", "dtype", "--vllm-version", "banana"),
    ):
        done = cli(*args)
        assert done.returncode == 2, args
        assert "error: 'banana' is not a vLLM version number" in done.stderr, args
        assert "hint: give a release such as" in done.stderr, args


@pytest.fixture
def broken_rule(monkeypatch):
    """A rule with a bug in it: the handler must not take its exception for the user's mistake."""
    from vllm_repo.validate.rules import RULES, all_rules

    all_rules()
    original = RULES["VR304"]

    def check(model, ctx):
        raise ValueError("a bug in a rule")  # the kind of exception validate used to report as a usage error
        yield

    import dataclasses

    monkeypatch.setitem(RULES, "VR304", dataclasses.replace(original, check=check))


def write_model(root: Path) -> Path:
    model = root / "repo" / "llm"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text('backend: "vllm"\n')
    (model / "1" / "model.json").write_text('{"model": "Qwen/Qwen2.5-0.5B-Instruct"}\n')
    return model.parent


def test_a_bug_exits_3_and_says_where_the_traceback_is(tmp_path, monkeypatch, broken_rule):
    monkeypatch.setenv("VLLM_REPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    repo = write_model(tmp_path)
    result = runner.invoke(build_app(["validate"]), ["validate", str(repo)])
    assert result.exit_code == BUG_EXIT_CODE == 3
    assert "internal error" in result.output and "ValueError: a bug in a rule" in result.output
    logs = list((tmp_path / "cache" / "crash").glob("vllm-repo-crash-*.log"))
    assert len(logs) == 1 and str(logs[0]) in result.output
    text = logs[0].read_text()
    assert "Traceback" in text and "a bug in a rule" in text and "argv:" in text
    assert "Traceback" not in result.output


def test_debug_prints_the_traceback_instead(tmp_path, monkeypatch, broken_rule):
    monkeypatch.setenv("VLLM_REPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(DEBUG_ENV, raising=False)
    repo = write_model(tmp_path)
    result = runner.invoke(build_app(["validate"]), ["--debug", "validate", str(repo)])
    assert result.exit_code == 3
    assert "Traceback" in result.output and "raise ValueError" in result.output
    assert not (tmp_path / "cache" / "crash").exists()


def test_errors_from_the_library_carry_the_hint_and_diagnostics(tmp_path, hf_model):
    from vllm_repo.scaffold import InitError, init_model

    with pytest.raises(InitError) as refused:
        init_model(tmp_path / "repo", str(hf_model), settings={"dtype": "bf16"})
    assert isinstance(refused.value, VllmRepoError) and refused.value.exit_code == 1
    assert refused.value.hint and any(d.code == "VR304" for d in refused.value.diagnostics)
    done = cli("init", str(tmp_path / "repo"), "--model", str(hf_model), "--set", "dtype=bf16")
    assert done.returncode == 1
    # The findings come first, in validate's format, then the message and its hint.
    lines = done.stderr.splitlines()
    finding = next(i for i, line in enumerate(lines) if "error[VR304]" in line)
    message = next(i for i, line in enumerate(lines) if line.startswith("error: "))
    assert finding < message and lines[message + 1].startswith("  hint: ")
