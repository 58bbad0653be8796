"""`vllm-repo validate`."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path

import typer

from vllm_repo.cli import app


class OutputFormat(str, Enum):
    text = "text"
    json = "json"
    github = "github"


@app.command()
def validate(
    paths: list[Path] = typer.Argument(..., help="Repository roots, model directories or single files."),
    vllm_version: str = typer.Option(None, "--vllm-version", help="vLLM release to check model.json against "
                                     "(default: the installed vLLM, else the newest bundled schema)."),
    output_format: OutputFormat = typer.Option(OutputFormat.text, "--format", help="text, json or github."),
    strict: bool = typer.Option(False, "--strict", help="Treat warnings as errors."),
    gpu: str = typer.Option(None, "--gpu", help="GPU the models run on (e.g. 'H100 80GB'), for the memory check."),
    select: list[str] = typer.Option(None, "--select", help="Only run rules whose code starts with this."),
    ignore: list[str] = typer.Option(None, "--ignore", help="Skip rules whose code starts with this."),
) -> None:
    """Check config.pbtxt, model.json and multi_lora.json before Triton loads them."""
    from vllm_repo.reporters import REPORTERS
    from vllm_repo.validate import PathError, validate_paths

    # Findings quote what the files contain, which may be lone surrogate escapes ("\ud800") or file names that
    # are not UTF-8: print those escaped rather than die with UnicodeEncodeError.
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")

    try:
        result = validate_paths(paths, vllm_version=vllm_version, strict=strict, gpu=gpu, select=select,
                                ignore=ignore)
    except (PathError, ValueError, LookupError) as exc:
        typer.echo(f"vllm-repo validate: {exc}", err=True)
        raise typer.Exit(2) from None
    REPORTERS[output_format.value](result, sys.stdout, sys.stderr)
    raise typer.Exit(1 if result.has_errors else 0)


@app.command("rules")
def list_rules() -> None:
    """List validate's rules: code, default severity, name and what each checks."""
    from vllm_repo.rules import all_rules

    for r in all_rules():
        typer.echo(f"{r.code}  {r.severity.value:<7}  {r.name:<24}  {r.summary}")
