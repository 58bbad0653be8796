"""Terminal output the commands share: findings (validate's, export's, init's and launch's refusals) as the text
reporter writes them (Diagnostic.text), on stderr."""

from __future__ import annotations

from collections.abc import Iterable

import typer

from vllm_repo.diagnostics.diagnostic import Diagnostic


def print_diagnostics(diagnostics: Iterable[Diagnostic]) -> None:
    for d in sorted(diagnostics, key=Diagnostic.sort_key):
        typer.echo(d.text(), err=True)


def print_notes(notes: Iterable[str]) -> None:
    for note in notes:
        typer.echo(f"note: {note}", err=True)
