"""The command line: parses options and calls the library, nothing more. Each command lives in its own module."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="vllm-repo",
    help="Scaffold, validate, size and serve Triton Inference Server model repositories for the vLLM backend.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Scaffold, validate, size and serve Triton Inference Server model repositories for the vLLM backend."""


# Command name -> the module that registers it on `app`. Only the module of the command being run is imported,
# so `vllm-repo validate` in pre-commit does not pay for the HTTP client or the estimator.
COMMAND_MODULES = {
    "validate": "validate_cmd", "rules": "validate_cmd",
    "schema": "schema_cmd",
    "estimate": "estimate_cmd", "gpus": "estimate_cmd",
    "init": "init_cmd",
    "launch": "launch_cmd",
    "infer": "infer_cmd",
    "backend": "backend_cmd",
}


def main() -> None:
    import importlib
    import sys

    wanted = COMMAND_MODULES.get(sys.argv[1]) if len(sys.argv) > 1 else None
    modules = [wanted] if wanted else sorted(set(COMMAND_MODULES.values()))  # --help and typos list every command
    for module in modules:
        importlib.import_module(f"vllm_repo.cli.{module}")
    app()
