"""The command line: parses options and calls the library, nothing more.

Each command is a plain function in its own module (cli/<command>.py); COMMANDS below wires them, the one place
that does. Only the module of the command being run is imported, so `vllm-repo validate` in pre-commit does not
pay for the HTTP client or the estimator. Errors are printed by one handler (cli/handler.py).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable
from typing import Annotated

import typer

from vllm_repo.cli.handler import DEBUG_ENV, HandledGroup

HELP = "Scaffold, validate, size and serve Triton Inference Server model repositories for the vLLM backend."

# Command name -> (module in vllm_repo.cli, its function or command group), in the order of a user's work: write
# a repository, check it, size it, serve it; then the tools. --help lists them in this order.
COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("init", "init"),
    "validate": ("validate", "validate"),
    "rules": ("validate", "rules"),
    "upgrade": ("upgrade", "upgrade"),
    "estimate": ("estimate", "estimate"),
    "gpus": ("estimate", "gpus"),
    "plan": ("plan", "plan"),
    "launch": ("launch", "launch"),
    "infer": ("infer", "infer"),
    "openai": ("openai", "openai"),
    "bench": ("bench", "bench"),
    "tune": ("tune", "tune"),
    "doctor": ("doctor", "doctor"),
    # Command groups: --help lists them after the commands.
    "schema": ("schema", "schema_app"),
    "backend": ("backend", "backend_app"),
    "export": ("export", "export_app"),
}


def _print_version(value: bool) -> None:
    if value:
        from vllm_repo import __version__

        typer.echo(f"vllm-repo {__version__}")
        raise typer.Exit()


def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Print the traceback of an internal error.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    if debug:
        os.environ[DEBUG_ENV] = "1"


def build_app(names: Iterable[str] | None = None) -> typer.Typer:
    """The CLI with the named commands (all of them by default)."""
    app = typer.Typer(
        name="vllm-repo",
        help=HELP,
        cls=HandledGroup,
        # Plain help: rich mode labels every flag <bool> ("--force <bool>"), which reads as if it took a value.
        rich_markup_mode=None,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    for name in COMMANDS if names is None else names:
        module, attribute = COMMANDS[name]
        command = getattr(importlib.import_module(f"vllm_repo.cli.{module}"), attribute)
        if isinstance(command, typer.Typer):
            app.add_typer(command, name=name)
        else:
            app.command(name)(command)
    return app


def main() -> None:
    # The first argument that is not an option names the command; --help and typos list every command.
    wanted = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
    build_app([wanted] if wanted in COMMANDS else None)()
