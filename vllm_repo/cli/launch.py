"""`vllm-repo launch`: options in, launch_plan.prepare_launch + launch.run_server (or docker) out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from vllm_repo.cli.options import api_key_option, cors_options, host_option, vllm_version_option
from vllm_repo.cli.output import print_diagnostics, print_notes
from vllm_repo.errors import UsageError
from vllm_repo.serve.ports import DEFAULT_GRPC_PORT, DEFAULT_HOST, DEFAULT_HTTP_PORT, DEFAULT_METRICS_PORT

LAUNCH_CORS = cors_options("With --openai-port: ")
# Options of the OpenAI API alone, by parameter name. Given without --openai-port they would guard or open nothing:
# Triton's own endpoints take no key and send no CORS headers.
OPENAI_ONLY = ("api_key", "allowed_origins", "allow_credentials", "allowed_methods", "allowed_headers")
# Options of a server launch runs itself: the container of --docker brings its own server, Python and console.
LOCAL_ONLY = ("tritonserver", "python", "ready_timeout", "log_file")


def given_on_the_command_line(ctx: typer.Context, names: tuple[str, ...]) -> list[str]:
    """The flags of the parameters ``names`` that the command line gave (not a default, nor VLLM_API_KEY from the
    environment)."""
    # By name: newer typer releases vendor click, whose ParameterSource is then another enum than click's own.
    return [
        param.opts[0]
        for param in ctx.command.params
        if param.name in names and getattr(ctx.get_parameter_source(param.name), "name", "") == "COMMANDLINE"
    ]


def launch(
    ctx: typer.Context,
    repo: Annotated[Path, typer.Argument(help="Model repository to serve.")],
    http_port: Annotated[
        int, typer.Option("--http-port", help="HTTP port (0: a free one, picked).")
    ] = DEFAULT_HTTP_PORT,
    grpc_port: Annotated[int, typer.Option("--grpc-port", help="gRPC port (0: a free one).")] = DEFAULT_GRPC_PORT,
    metrics_port: Annotated[
        int, typer.Option("--metrics-port", help="Prometheus metrics port (0: a free one).")
    ] = DEFAULT_METRICS_PORT,
    host: Annotated[str, host_option("the server to other machines")] = DEFAULT_HOST,
    tritonserver: Annotated[Path | None, typer.Option("--tritonserver", help="A tritonserver binary to use.")] = None,
    python: Annotated[
        Path | None,
        typer.Option(
            "--python",
            help="Python with vLLM and numpy<2 for the backend (default: $VLLM_REPO_SERVING_PYTHON, else this Python).",
        ),
    ] = None,
    vllm_version: Annotated[
        str | None, vllm_version_option("to validate against", default="the vLLM of the backend Python, --python")
    ] = None,
    docker: Annotated[
        bool, typer.Option("--docker", help="Run the matching NGC tritonserver vLLM container instead.")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="With --docker: print the docker command, run nothing.")
    ] = False,
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            help="With --docker: run this image (e.g. one built from the Dockerfile of `export kubernetes`, which "
            "adds the bundled backend) instead of the NGC container itself.",
        ),
    ] = None,
    ready_timeout: Annotated[
        float, typer.Option("--ready-timeout", help="Seconds to wait for the models to load.")
    ] = 900.0,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            envvar="RAY_ADDRESS",
            help="The Ray cluster (HEAD:PORT, or auto) of the models on Ray: checked for their GPUs before Triton "
            "starts, and passed to the server as RAY_ADDRESS.",
        ),
    ] = None,
    log_file: Annotated[
        Path | None,
        typer.Option(
            "--log-file",
            help="Write the server's log here, appended to and kept (default: a temporary file, removed after a "
            "clean stop).",
        ),
    ] = None,
    openai_port: Annotated[
        int | None,
        typer.Option(
            "--openai-port",
            metavar="PORT",
            help="Also serve the OpenAI API (/v1/chat/completions, /v1/completions, /v1/responses, /v1/models) and "
            "the Anthropic Messages API (/v1/messages) on this port (0: a free one).",
        ),
    ] = None,
    api_key: Annotated[list[str] | None, api_key_option("With --openai-port: ")] = None,
    allowed_origins: Annotated[str | None, LAUNCH_CORS["allowed_origins"]] = None,
    allow_credentials: Annotated[bool, LAUNCH_CORS["allow_credentials"]] = False,
    allowed_methods: Annotated[str | None, LAUNCH_CORS["allowed_methods"]] = None,
    allowed_headers: Annotated[str | None, LAUNCH_CORS["allowed_headers"]] = None,
) -> None:
    """Validate REPO, start a Triton server for it, and serve until Ctrl-C."""
    stray = given_on_the_command_line(ctx, OPENAI_ONLY) if openai_port is None else []
    if stray:
        raise UsageError(
            f"{stray[0]} goes with --openai-port: it applies to the OpenAI API, and Triton's own endpoints take no "
            "API key and send no CORS headers"
        )
    if dry_run and not docker:
        raise UsageError("--dry-run goes with --docker")
    if image is not None and not docker:
        raise UsageError("--image goes with --docker")
    local = given_on_the_command_line(ctx, LOCAL_ONLY) if docker else []
    if local:
        raise UsageError(
            f"{local[0]} goes without --docker: the container runs its own Triton and vLLM, and logs to the console"
        )
    if openai_port is not None and docker:
        raise UsageError(
            "--openai-port goes without --docker; run `vllm-repo openai --triton-url` beside the container"
        )
    if docker and 0 in (http_port, grpc_port, metrics_port):
        raise UsageError("a port of 0 (a free one, picked) goes without --docker: give the container's ports")
    if docker:
        _docker(repo, http_port, grpc_port, metrics_port, host, vllm_version, dry_run, ray_address, image)
        return
    from vllm_repo.serve.launch import run_server
    from vllm_repo.serve.launch_plan import prepare_launch

    cors = None
    if openai_port is not None:
        from vllm_repo.extras import require_gateway

        require_gateway()
        from vllm_repo.serve.openai.cors import CorsPolicy

        cors = CorsPolicy.from_options(allowed_origins, allow_credentials, allowed_methods, allowed_headers)

    def progress(message: str) -> None:
        typer.echo(message, err=True)

    plan = prepare_launch(
        repo,
        host=host,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        tritonserver=tritonserver,
        python=python,
        vllm_version=vllm_version,
        progress=progress,
        openai_port=openai_port,
        openai_api_keys=api_key or [],
        openai_cors=cors,
        ray_address=ray_address,
    )
    print_diagnostics(plan.diagnostics)
    print_notes(plan.notes)
    typer.echo(
        f"backend Python: {plan.python.executable} (vLLM {plan.python.vllm_version}, "
        f"numpy {plan.python.numpy_version})",
        err=True,
    )
    raise typer.Exit(run_server(plan, out=sys.stderr, ready_timeout=ready_timeout, log_path=log_file))


def _docker(
    repo: Path,
    http_port: int,
    grpc_port: int,
    metrics_port: int,
    host: str,
    vllm_version: str | None,
    dry_run: bool,
    ray_address: str | None,
    image: str | None = None,
) -> None:
    from vllm_repo.serve.docker import docker_plan, run_docker
    from vllm_repo.serve.launch_plan import validate_repository

    plan = docker_plan(
        repo,
        http_port=http_port,
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        host=host,
        vllm_version=vllm_version,
        ray_address=ray_address,
        image=image,
    )
    # Checked against the vLLM inside the chosen container.
    print_diagnostics(validate_repository(repo, plan.match.release.vllm))
    print_notes(plan.notes)
    if dry_run:
        typer.echo(plan.shell_command())
        return
    raise typer.Exit(run_docker(plan))
