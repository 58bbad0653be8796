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


def main() -> None:
    # Command modules register themselves on `app` when imported.
    from vllm_repo.cli import validate_cmd  # noqa: F401
    from vllm_repo.cli import backend_cmd  # noqa: F401
    from vllm_repo.cli import init_cmd  # noqa: F401
    from vllm_repo.cli import launch_cmd  # noqa: F401
    from vllm_repo.cli import infer_cmd  # noqa: F401
    from vllm_repo.cli import schema_cmd  # noqa: F401
    from vllm_repo.cli import estimate_cmd  # noqa: F401

    app()
