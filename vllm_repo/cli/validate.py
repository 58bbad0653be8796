"""`vllm-repo validate` and `vllm-repo rules`."""

from __future__ import annotations

import dataclasses
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from vllm_repo.cli.options import (
    OutputFormat,
    diff_option,
    gpu_option,
    num_gpus_option,
    report_format_option,
    vllm_version_option,
)


class RulesFormat(str, Enum):
    text = "text"
    markdown = "markdown"


def validate(
    paths: Annotated[list[Path], typer.Argument(help="Repository roots, model directories or single files.")],
    vllm_version: Annotated[str | None, vllm_version_option("to check model.json against")] = None,
    output_format: Annotated[OutputFormat, report_format_option()] = OutputFormat.text,
    strict: Annotated[bool, typer.Option("--strict", help="Treat warnings as errors.")] = False,
    gpu: Annotated[str | None, gpu_option("the models run on, for the memory checks (VR6)")] = None,
    num_gpus: Annotated[int | None, num_gpus_option("on the host, 0 to N-1, for the placement checks")] = None,
    select: Annotated[
        list[str] | None, typer.Option("--select", metavar="CODE", help="Only run rules whose code starts with this.")
    ] = None,
    ignore: Annotated[
        list[str] | None, typer.Option("--ignore", metavar="CODE", help="Skip rules whose code starts with this.")
    ] = None,
    fix: Annotated[
        bool, typer.Option("--fix", help="Rewrite what has one right answer (files keep their formatting).")
    ] = False,
    diff: Annotated[bool, diff_option("--fix")] = False,
) -> None:
    """Check config.pbtxt, model.json and multi_lora.json before Triton loads them."""
    from vllm_repo.diagnostics.reporters import REPORTERS
    from vllm_repo.validate import validate_paths

    # Findings quote what the files contain, which may be lone surrogate escapes ("\ud800") or file names that
    # are not UTF-8: print those escaped rather than die with UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")

    options = {
        "vllm_version": vllm_version,
        "strict": strict,
        "gpu": gpu,
        "num_gpus": num_gpus,
        "select": select,
        "ignore": ignore,
    }
    if not (fix or diff):
        result = validate_paths(
            paths, vllm_version=vllm_version, strict=strict, gpu=gpu, num_gpus=num_gpus, select=select, ignore=ignore
        )
        REPORTERS[output_format.value](result, sys.stdout, sys.stderr)
        raise typer.Exit(1 if result.has_errors else 0)

    from vllm_repo.diagnostics.diagnostic import display_path
    from vllm_repo.validate import fix_paths

    plan, result = fix_paths(paths, write=not diff, **options)
    if diff:
        # The patch alone on stdout (it can go to `git apply`); on stderr, what --fix would leave, and the summary.
        sys.stdout.write(plan.diff({path: display_path(path) for path in plan.texts}))
        fixed = {id(d) for d, _ in plan.applied}
        left = dataclasses.replace(result, diagnostics=[d for d in result.diagnostics if id(d) not in fixed])
        changed = len(plan.texts) + len(plan.moves)
        typer.echo(
            f"--fix would change {changed} file{'s' * (changed != 1)}; what it would leave:"
            if plan.changes
            else "nothing for --fix to change (no finding has one right answer); what is found:",
            err=True,
        )
        if plan.moves:
            typer.echo(
                "a file under its right name is checked only then: --fix checks the moved files too, and fixes them "
                "in the same run",
                err=True,
            )
        REPORTERS[output_format.value](left, sys.stderr, sys.stderr)
        raise typer.Exit(1 if plan.changes or result.has_errors else 0)
    for diagnostic, change in plan.applied:
        typer.echo(f"fixed {diagnostic.location()}: [{diagnostic.code}] {change.description}", err=True)
    for diagnostic, _, why in plan.skipped:
        typer.echo(f"not fixed {diagnostic.location()}: [{diagnostic.code}] {why}", err=True)
    if not plan.converged:
        typer.echo(
            f"--fix stopped after {plan.passes} passes, each of which still changed something: two fixes may undo "
            "each other; the findings below are what is left",
            err=True,
        )
    REPORTERS[output_format.value](result, sys.stdout, sys.stderr)  # what is left
    raise typer.Exit(1 if result.has_errors else 0)


def rules(
    code: Annotated[str | None, typer.Argument(help="A rule code, e.g. VR304: explain that rule.")] = None,
    output_format: Annotated[
        RulesFormat, typer.Option("--format", help="text, or markdown (the table in docs/rules.md).")
    ] = RulesFormat.text,
) -> None:
    """List validate's rules (code, default severity, name, what each checks), or explain one."""
    from vllm_repo.validate.rules.docs import explain, rules_table, rules_text

    if code is not None:
        typer.echo(explain(code))
    elif output_format is RulesFormat.markdown:
        typer.echo(rules_table(), nl=False)
    else:
        typer.echo(rules_text(), nl=False)
