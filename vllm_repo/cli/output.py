"""Terminal output shared by the serving commands (init, launch, infer): errors without tracebacks."""

from __future__ import annotations

from typing import NoReturn

import typer

from vllm_repo.diagnostics import Diagnostic


def fail(message: str, hint: str | None = None, code: int = 1) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    if hint:
        typer.echo(f"  hint: {hint}", err=True)
    raise typer.Exit(code)


def format_diagnostic(d: Diagnostic) -> str:
    """As `vllm-repo validate` prints it."""
    where = ":".join([d.file or "<repository>", *([str(d.line)] if d.line is not None else []),
                      *([str(d.column)] if d.line is not None and d.column is not None else [])])
    text = f"{where}: {d.severity.value}[{d.code}] {d.message}"
    return text + (f"\n    hint: {d.hint}" if d.hint else "")


def print_diagnostics(diagnostics: list[Diagnostic]) -> None:
    for d in sorted(diagnostics, key=lambda d: d.sort_key()):
        typer.echo(format_diagnostic(d), err=True)
