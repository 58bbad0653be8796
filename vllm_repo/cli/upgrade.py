"""`vllm-repo upgrade`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from vllm_repo.cli.options import diff_option


def upgrade(
    paths: Annotated[list[Path], typer.Argument(help="Repository roots or model directories.")],
    to: Annotated[str | None, typer.Option("--to", metavar="X.Y.Z", help="The vLLM release to migrate to.")] = None,
    to_container: Annotated[
        str | None,
        typer.Option("--to-container", metavar="YY.MM", help="Migrate to the vLLM of this NGC vllm-python-py3 image."),
    ] = None,
    from_version: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="X.Y.Z",
            help="The release the files were written for (default: per file, the newest that knows its keys).",
        ),
    ] = None,
    diff: Annotated[bool, diff_option()] = False,
) -> None:
    """Migrate model.json engine arguments to another vLLM release, and list the defaults that change."""
    from vllm_repo.diagnostics.diagnostic import display_path
    from vllm_repo.diagnostics.reporters import report_text
    from vllm_repo.upgrade import upgrade_paths
    from vllm_repo.upgrade.report import report_lines

    result = upgrade_paths(paths, to=to, to_container=to_container, from_version=from_version, write=not diff)
    if diff:
        sys.stdout.write(result.plan.diff({path: display_path(path) for path in result.plan.texts}))
    for line in report_lines(result, written=not diff):
        typer.echo(line, err=True)
    if not diff:
        report_text(result.remaining, sys.stdout, sys.stderr)  # what is left for the target release
    left = result.needs_user or (result.remaining.has_errors and not diff) or not result.backend[0]
    raise typer.Exit(1 if left else 0)
