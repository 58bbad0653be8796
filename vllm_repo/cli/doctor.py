"""`vllm-repo doctor`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from vllm_repo.cli.options import OutputFormat, gpu_option, report_format_option


def doctor(
    log: Annotated[Path | None, typer.Argument(help="A Triton server log (tritonserver's output).")] = None,
    repository: Annotated[
        Path | None,
        typer.Argument(help="The model repository the server ran: for a memory failure, what estimate recommends."),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", metavar="URL", help="A running server, e.g. http://127.0.0.1:8000: its models' states."),
    ] = None,
    gpu: Annotated[str | None, gpu_option("it ran on, for estimate's recommendation", "what the log says")] = None,
    output_format: Annotated[OutputFormat, report_format_option()] = OutputFormat.text,
    client_errors: Annotated[
        bool,
        typer.Option(
            "--client-errors",
            help="Also list the clients' errors in the log (the 4xx answers vLLM logs at ERROR), which are no fault "
            "of the server.",
        ),
    ] = False,
) -> None:
    """Read a failed Triton server's log (or ask the running server): the root cause, and the fix."""
    from vllm_repo.doctor import run
    from vllm_repo.doctor.report import report

    diagnosis = run(log, url=url, repository=repository, gpu=gpu)
    if output_format is OutputFormat.json:
        typer.echo(json.dumps(diagnosis.to_dict(client_errors=client_errors), indent=2))
    else:
        github = output_format is OutputFormat.github
        typer.echo(report(diagnosis, github=github, client_errors=client_errors), nl=False)
    raise typer.Exit(1 if diagnosis.failed else 0)
