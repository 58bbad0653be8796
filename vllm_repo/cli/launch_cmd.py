"""`vllm-repo launch`: options in, launch.prepare_launch + run_server (or docker) out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from vllm_repo.cli import app
from vllm_repo.cli.output import fail, print_diagnostics


@app.command("launch")
def launch_command(
    repo: Path = typer.Argument(..., help="Model repository to serve."),
    http_port: int = typer.Option(8000, "--http-port", help="HTTP port."),
    grpc_port: int = typer.Option(8001, "--grpc-port", help="gRPC port."),
    metrics_port: int = typer.Option(8002, "--metrics-port", help="Prometheus metrics port."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0 exposes the server)."),
    tritonserver: Optional[Path] = typer.Option(None, "--tritonserver", help="A tritonserver binary to use."),
    python: Optional[Path] = typer.Option(
        None, "--python", help="Python with vLLM and numpy<2 for the backend (default: $VLLM_REPO_SERVING_PYTHON, "
                               "else this Python)."),
    vllm_version: Optional[str] = typer.Option(None, "--vllm-version", help="vLLM release to validate against."),
    docker: bool = typer.Option(False, "--docker", help="Run the matching NGC tritonserver vLLM container instead."),
    dry_run: bool = typer.Option(False, "--dry-run", help="With --docker: print the docker command, run nothing."),
    ready_timeout: float = typer.Option(900.0, "--ready-timeout", help="Seconds to wait for the models to load."),
) -> None:
    """Validate REPO, start a Triton server for it, and serve until Ctrl-C."""
    if dry_run and not docker:
        fail("--dry-run goes with --docker", code=2)
    if docker:
        _docker(repo, http_port, grpc_port, metrics_port, host, vllm_version, dry_run)
        return
    from vllm_repo.launch import LaunchError, prepare_launch, run_server

    def progress(message: str) -> None:
        typer.echo(message, err=True)

    try:
        plan = prepare_launch(repo, host=host, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port,
                              tritonserver=tritonserver, python=python, vllm_version=vllm_version, progress=progress)
        print_diagnostics(plan.diagnostics)
        for note in plan.notes:
            typer.echo(f"note: {note}", err=True)
        typer.echo(f"backend Python: {plan.python.executable} (vLLM {plan.python.vllm_version}, "
                   f"numpy {plan.python.numpy_version})", err=True)
        code = run_server(plan, out=sys.stderr, ready_timeout=ready_timeout)
    except LaunchError as exc:
        print_diagnostics(exc.diagnostics)
        fail(exc.message, exc.hint)
    raise typer.Exit(code)


def _docker(repo: Path, http_port: int, grpc_port: int, metrics_port: int, host: str, vllm_version: Optional[str],
            dry_run: bool) -> None:
    from vllm_repo.docker import DockerError, docker_plan, run_docker
    from vllm_repo.launch import LaunchError, validate_repository

    try:
        plan = docker_plan(repo, http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, host=host,
                           vllm_version=vllm_version)
        # Checked against the vLLM inside the chosen container.
        diagnostics = validate_repository(repo, plan.match.release.vllm)
    except (LaunchError, DockerError) as exc:
        print_diagnostics(getattr(exc, "diagnostics", []))
        fail(exc.message, exc.hint)
    print_diagnostics(diagnostics)
    for note in plan.notes:
        typer.echo(f"note: {note}", err=True)
    if dry_run:
        typer.echo(plan.shell_command())
        return
    try:
        code = run_docker(plan)
    except DockerError as exc:
        fail(exc.message, exc.hint)
    raise typer.Exit(code)
