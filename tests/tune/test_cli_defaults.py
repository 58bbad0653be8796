"""tune's options take their defaults from the library's TuneSpec: each option that sets a field of it defaults to the
field's default (read from TuneSpec in cli/tune.py, not written again), and tune run with no options asks the library
for a TuneSpec with every default."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import vllm_repo.tune
from vllm_repo.benchmark import Slo
from vllm_repo.cli import build_app
from vllm_repo.cli import tune as cli_tune
from vllm_repo.tune.spec import DEFAULT_CONCURRENCY, TuneSpec

# The CLI's option -> the TuneSpec field it sets.
FIELD_OF = {
    "model": "model", "concurrency": "concurrency", "request_rate": "request_rates", "num_prompts": "num_prompts",
    "input_len": "input_len", "output_len": "output_len", "dataset": "dataset", "budget_minutes": "budget_minutes",
    "gpu": "gpu", "num_gpus": "num_gpus", "max_num_seqs": "max_num_seqs",
    "max_num_batched_tokens": "max_num_batched_tokens", "switches": "switches", "seed": "seed", "grid": "grid",
    "confirm": "confirm", "resume": "resume", "python": "python", "ready_timeout": "ready_timeout", "log": "log_path",
}  # fmt: skip
# Options that are the CLI's own (what to do with the result), and the arguments a run must be given.
CLI_ONLY = {"ctx", "repo", "slo", "write", "output_format", "plot", "force"}
# Where the option's "not given" is spelled otherwise than the field's: no --model is the field's "" (the only model),
# no --resume its None (nothing to resume from).
UNSET_SPELLED = {"model": (None, ""), "resume": (False, None)}
# Fields only the library sets: the repository and SLO (the argument and --slo), and the warm-up requests.
LIBRARY_ONLY = {"repository", "slo", "warmup"}

PARAMETERS = inspect.signature(cli_tune.tune).parameters
SPEC_DEFAULTS = {f.name: f.default for f in dataclasses.fields(TuneSpec) if f.default is not dataclasses.MISSING}


def test_every_option_is_either_a_field_of_tune_spec_or_the_clis_own():
    assert set(PARAMETERS) == set(FIELD_OF) | CLI_ONLY
    assert set(FIELD_OF.values()) | LIBRARY_ONLY == {f.name for f in dataclasses.fields(TuneSpec)}


@pytest.mark.parametrize("option", sorted(FIELD_OF))
def test_each_options_default_is_the_librarys(option):
    cli_default, field = PARAMETERS[option].default, FIELD_OF[option]
    if option in UNSET_SPELLED:
        assert (cli_default, SPEC_DEFAULTS[field]) == UNSET_SPELLED[option]
    else:
        assert cli_default == SPEC_DEFAULTS[field], f"--{option.replace('_', '-')} defaults to {cli_default!r}"


def test_the_defaults_are_read_from_tune_spec_not_written_again():
    """A literal equal to today's default would drift the day the library's changes: each default that is not None
    (or the spelled-out unset of UNSET_SPELLED) names TuneSpec's field."""
    source = Path(cli_tune.__file__).read_text(encoding="utf-8")
    (function,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "tune"]
    arguments = function.args.args[len(function.args.args) - len(function.args.defaults) :]
    for argument, default in zip(arguments, function.args.defaults, strict=True):
        if argument.arg not in FIELD_OF or argument.arg in UNSET_SPELLED:
            continue
        if isinstance(default, ast.Constant) and default.value is None:
            continue
        assert ast.unparse(default) == f"TuneSpec.{FIELD_OF[argument.arg]}", argument.arg


def test_the_concurrency_options_help_names_the_librarys_default():
    app = build_app(["tune"])
    command = next(c for c in app.registered_commands if c.name == "tune")
    assert command.callback is cli_tune.tune
    help_text = CliRunner().invoke(app, ["tune", "--help"], env={"COLUMNS": "200"}).output
    assert f"(default {DEFAULT_CONCURRENCY})" in help_text


def test_tune_with_no_options_asks_the_library_for_every_default(tmp_path, monkeypatch):
    asked: list[TuneSpec] = []

    def tune(spec, **kwargs):
        asked.append(spec)
        raise typer.Exit(42)  # nothing to tune: the spec asked for is the point

    monkeypatch.setattr(vllm_repo.tune, "tune", tune)
    result = CliRunner().invoke(build_app(["tune"]), ["tune", str(tmp_path), "--slo", "ttft_p99_ms=1000"])
    assert result.exit_code == 42, result.output
    assert asked == [TuneSpec(repository=tmp_path, slo=Slo(ttft_p99_ms=1000), resume=False)]
