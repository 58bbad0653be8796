"""Every command vllm-repo prints as advice parses with vllm-repo's own CLI.

Advice is what the user is told to run next: validate's hints, doctor's fixes and estimate's recommendations, the
notes and "next:" lines of init, plan and estimate, and the quickstart's closing suggestion. This test prints them
over a corpus (every rule's documented example repository under validate, every log under tests/doctor, and the
repositories the CLI's own commands make from a config-only model), picks out each `vllm-repo ...` command (in
backticks, or a line of its own) and parses its arguments with the command objects of vllm_repo.cli, the way the
shell would hand them over, without running anything: an option that does not exist, a missing argument or a value
of the wrong type is a usage error, and fails here. No server, no network.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tests.support.model_configs import write_hf_config
from tests.support.rule_examples import OPTIONS, VERSION, write_example
from vllm_repo.cli import build_app
from vllm_repo.validate import validate_paths
from vllm_repo.validate.rules import all_rules
from vllm_repo.validate.rules.docs import rule_doc

ROOT = Path(__file__).resolve().parents[2]
DOCTOR_LOGS = sorted((ROOT / "tests" / "doctor").glob("*_logs/*.log"))
# The usage error of the click that typer runs on (typer may vendor its own).
CLI_USAGE_ERROR: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
_BACKTICKED = re.compile(r"`(vllm-repo [^`]+)`")
_OWN_LINE = re.compile(r"^\s*(?:next:\s*|\$\s*)?(vllm-repo \S.*)$")


def commands_in(text: str) -> list[str]:
    """The vllm-repo commands a text tells the user to run: in backticks, or a line of their own ("next: ...")."""
    found = [c.strip() for c in _BACKTICKED.findall(text)]
    for line in text.splitlines():
        match = _OWN_LINE.match(line)
        if match and "`" not in line:
            found.append(match[1].strip())
    return found


@functools.cache
def _command() -> Any:
    """vllm-repo's command tree, as click parses it."""
    return typer.main.get_command(build_app())


def usage_error(command: str) -> str | None:
    """Why ``command`` is a usage error of the vllm-repo CLI, None when its arguments parse (nothing is run).

    A command's name alone (`vllm-repo estimate` recommends one) names the command, it is no invocation: what it
    needs is the reader's to give. Anything more is an invocation, and must parse."""
    args = shlex.split(command)[1:]
    cmd: Any = _command()
    rest = args
    try:
        ctx = cmd.make_context("vllm-repo", list(args))
        while hasattr(cmd, "resolve_command"):  # a group: its subcommand takes the rest
            rest = [*getattr(ctx, "_protected_args", getattr(ctx, "protected_args", [])), *ctx.args]
            name, cmd, rest = cmd.resolve_command(ctx, rest)
            ctx = cmd.make_context(name, list(rest), parent=ctx)  # click consumes the list it parses
    except CLI_USAGE_ERROR as exc:
        if not rest and type(exc).__name__ == "MissingParameter":
            return None  # the command's name
        return exc.format_message()  # type: ignore[attr-defined]
    # An option that takes a value swallows the next option as its value (`plan REPO --pack --write`): click lets it
    # through, the command then refuses it.
    options = {name for param in cmd.params for name in getattr(param, "opts", ())}
    for param, value in ctx.params.items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, str) and item.split("=")[0] in options:
                return f"--{param.replace('_', '-')} took the option {item} as its value"
    return None


def check(text: str) -> list[str]:
    """Each advice command of ``text`` that is a usage error, with the error."""
    return [f"{c!r}: {why}" for c in commands_in(text) if (why := usage_error(c)) is not None]


def cli(*args: object) -> str:
    """What a command prints, stdout and stderr."""
    return CliRunner().invoke(build_app(), [str(a) for a in args]).output


# --- the parser itself ------------------------------------------------------------------------------------------------


def test_the_check_tells_a_usage_error_from_a_command_that_parses():
    assert usage_error("vllm-repo estimate repo/llm --gpu L4") is None
    assert usage_error("vllm-repo backend install /opt/tritonserver/backends --force") is None
    assert "--no-such" in (usage_error("vllm-repo validate repo --no-such") or "")
    assert usage_error("vllm-repo validate repo --num-gpus N") is not None  # not a number
    assert usage_error("vllm-repo no-such-command") is not None
    assert usage_error("vllm-repo estimate") is None  # the command named, as in "`vllm-repo estimate` shows it"
    assert "Missing argument" in (usage_error("vllm-repo validate --fix") or "")
    assert "took the option --write" in (usage_error("vllm-repo plan repo --gpu L4 --pack --write") or "")
    assert usage_error("vllm-repo plan repo --gpu L4 --pack all --write") is None
    assert commands_in("fix: run `vllm-repo validate R --fix` first\nnext: vllm-repo launch R\n") == [
        "vllm-repo validate R --fix",
        "vllm-repo launch R",
    ]


# --- validate: every rule's documented example ------------------------------------------------------------------------


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_validates_hints_on_every_rule_example(rule, tmp_path, monkeypatch):
    target = write_example(tmp_path, rule_doc(rule).example)
    monkeypatch.chdir(tmp_path)
    result = validate_paths([target], vllm_version=VERSION, **OPTIONS.get(rule.code[:3], {}))
    text = "\n".join(f"{d.message}\n{d.hint or ''}" for d in result.diagnostics)
    assert check(text) == []


# --- doctor: every log, with the repository that ran ------------------------------------------------------------------


@pytest.mark.parametrize("log", DOCTOR_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_doctors_fixes_on_every_log(log, tmp_path):
    from vllm_repo.doctor import diagnose_file

    failed = diagnose_file(log).failed_models
    repo = tmp_path / "model_repository"
    name = failed[0][0] if failed else "llm"
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text('backend: "vllm"\n')
    model = write_hf_config(tmp_path / "models" / "tiny-llama")
    (repo / name / "1" / "model.json").write_text(json.dumps({"model": str(model)}))
    for args in ((log, repo), (log,)):  # the repository named in the fixes, or their placeholders
        assert check(cli("doctor", *args)) == [], args


# --- the repositories the CLI makes -----------------------------------------------------------------------------------


def _init_one(tmp: Path) -> str:
    model = write_hf_config(tmp / "models" / "tiny-llama")
    return cli("init", tmp / "repo", "--model", model, "--name", "tiny", "--gpu", "L4")


def _init_two_on_one_gpu(tmp: Path) -> str:
    model = write_hf_config(tmp / "models" / "tiny-llama")
    first = cli("init", tmp / "repo", "--model", model, "--name", "a", "--gpu", "L4")
    return first + cli("init", tmp / "repo", "--model", model, "--name", "b", "--gpu", "L4")


def _plan(tmp: Path) -> str:
    _init_two_on_one_gpu(tmp)
    return cli("plan", tmp / "repo", "--gpu", "L4", "--num-gpus", "1")


def _estimate(tmp: Path) -> str:
    _init_one(tmp)
    return cli("estimate", tmp / "repo" / "tiny", "--gpu", "T4") + cli("estimate", tmp / "repo" / "tiny", "--gpu", "4")


def _validate(tmp: Path) -> str:
    _init_two_on_one_gpu(tmp)
    return cli("validate", tmp / "repo", "--gpu", "L4") + cli(
        "validate", tmp / "repo", "--gpu", "T4", "--num-gpus", "1"
    )


def _init_offline(tmp: Path) -> str:
    return cli("init", tmp / "repo", "--model", "some-org/not-in-any-cache", "--gpu", "L4")


CLI_CASES: dict[str, Callable[[Path], str]] = {
    "init": _init_one,
    "init-shared-gpu": _init_two_on_one_gpu,
    "init-offline": _init_offline,
    "plan": _plan,
    "estimate": _estimate,
    "validate": _validate,
}


@pytest.mark.parametrize("case", CLI_CASES)
def test_the_advice_of_the_commands_on_the_repositories_they_make(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no network: a Hub model is read from the (empty) cache only
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    text = CLI_CASES[case](tmp_path)
    assert text.strip()
    assert check(text) == []


# --- the quickstart's closing suggestion ------------------------------------------------------------------------------


def test_the_quickstarts_closing_suggestion_parses_and_says_when_it_needs_the_hub():
    script = (ROOT / "scripts" / "quickstart.sh").read_text()
    closing = script[script.rindex('echo "done:') :]
    said = "\n".join(re.findall(r'^echo "(.*)" >&2$', closing, re.M))
    suggested = [line for line in said.splitlines() if "vllm-repo " in line]
    assert suggested
    for line in suggested:
        for command in re.split(r"\s*&&\s*", line.split("#")[0].strip()):
            assert usage_error(command) is None, command
            model = re.search(r"--model (\S+)", command)
            if model and not model[1].startswith(("$", "/", ".")):  # a Hugging Face repo id, not a directory
                assert "Hugging Face Hub" in said, said
