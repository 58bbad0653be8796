"""`vllm-repo openai`: options in, vllm_repo.serve.openai.run_gateway out."""

from __future__ import annotations

from typing import Annotated

import typer

from vllm_repo.cli.options import api_key_option, cors_options, host_option
from vllm_repo.serve.ports import DEFAULT_HOST, DEFAULT_OPENAI_PORT, DEFAULT_URL

CORS = cors_options()


def openai(
    triton_url: Annotated[
        str,
        typer.Option(
            "--triton-url",
            metavar="URL",
            help="The Triton server running the bundled backend: http://HOST:8000 (its gRPC port beside it) or "
            "grpc://HOST:8001.",
        ),
    ] = DEFAULT_URL,
    triton_grpc_port: Annotated[
        int | None,
        typer.Option("--triton-grpc-port", metavar="PORT", help="Triton's gRPC port, with an http:// --triton-url."),
    ] = None,
    triton_metrics_port: Annotated[
        int | None,
        typer.Option(
            "--triton-metrics-port",
            metavar="PORT",
            help="Triton's metrics port on the --triton-url host (8002 by default), served at /metrics as vllm serve "
            "serves its own.",
        ),
    ] = None,
    host: Annotated[str, host_option("the API to other machines")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option("--port", metavar="PORT", help="Port of the OpenAI API.")] = DEFAULT_OPENAI_PORT,
    api_key: Annotated[list[str] | None, api_key_option()] = None,
    stream_socket: Annotated[
        str,
        typer.Option(
            "--stream-socket",
            metavar="auto|on|off",
            help="Let backends on this host write streamed answers to a Unix socket of the gateway, not a Triton "
            "response per chunk: auto (when --triton-url is a loopback address), on, or off (every byte through "
            "Triton). A backend that cannot reach the socket answers through Triton.",
        ),
    ] = "auto",
    allowed_origins: Annotated[str | None, CORS["allowed_origins"]] = None,
    allow_credentials: Annotated[bool, CORS["allow_credentials"]] = False,
    allowed_methods: Annotated[str | None, CORS["allowed_methods"]] = None,
    allowed_headers: Annotated[str | None, CORS["allowed_headers"]] = None,
) -> None:
    """Serve the OpenAI API (/v1/models, /v1/chat/completions, /v1/completions, /v1/responses) and the Anthropic
    Messages API (/v1/messages) in front of a running Triton."""
    from vllm_repo.errors import UsageError
    from vllm_repo.extras import require_gateway

    require_gateway()
    from vllm_repo.serve.openai import (
        CorsPolicy,
        StreamSocketMode,
        grpc_address,
        metrics_url,
        print_ready,
        run_gateway,
    )

    try:
        mode = StreamSocketMode(stream_socket)
    except ValueError:
        raise UsageError(f"--stream-socket {stream_socket!r}", hint="give auto, on or off") from None
    cors = CorsPolicy.from_options(allowed_origins, allow_credentials, allowed_methods, allowed_headers)
    address = grpc_address(triton_url, triton_grpc_port)
    metrics = metrics_url(triton_url, triton_metrics_port)
    typer.echo(f"forwarding to Triton's gRPC endpoint at {address} (its metrics: {metrics})", err=True)
    raise typer.Exit(
        run_gateway(
            address, host, port, api_key or [], on_ready=print_ready, stream_socket=mode, cors=cors, metrics=metrics
        )
    )
