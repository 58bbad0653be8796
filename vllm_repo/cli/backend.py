"""`vllm-repo backend ...`: the bundled Triton backend."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_repo.backend import bundled_backend_path, install_backend
from vllm_repo.cli.options import force_option

backend_app = typer.Typer(
    help="The bundled Triton backend (model.py driving vLLM's AsyncLLM, and its package).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@backend_app.command("install")
def install(
    directory: Annotated[
        Path,
        typer.Argument(
            help="Triton backend directory (e.g. /opt/tritonserver/backends); the backend goes into "
            "DIRECTORY/NAME/model.py, its package beside it"
        ),
    ],
    name: Annotated[str, typer.Option("--name", help="Backend name: config.pbtxt's `backend:` value.")] = "vllm",
    force: Annotated[bool, force_option("a different backend already there")] = False,
) -> None:
    """Write the bundled backend (model.py and its package) into a Triton backend directory."""
    target, changed = install_backend(directory, name=name, force=force)
    typer.echo(f"{'installed' if changed else 'already up to date:'} {target}")


@backend_app.command("path")
def path() -> None:
    """Print where the bundled backend's model.py is."""
    typer.echo(str(bundled_backend_path()))
