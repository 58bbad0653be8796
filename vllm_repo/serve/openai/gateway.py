"""Running the OpenAI gateway: ``vllm-repo openai`` in front of a running Triton, and ``launch --openai-port``'s
child process (started in the server's process group, so it stops with the server)."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ipaddress
import signal
import sys
from collections.abc import Callable
from urllib.parse import urlsplit

from aiohttp import web

from vllm_repo.errors import UsageError, VllmRepoError
from vllm_repo.serve.openai.app import OpenAIGateway
from vllm_repo.serve.openai.cors import CorsPolicy
from vllm_repo.serve.openai.stream_socket import StreamSocket
from vllm_repo.serve.openai.triton import TritonOpenAIClient
from vllm_repo.serve.ports import DEFAULT_GRPC_PORT, DEFAULT_HOST, DEFAULT_METRICS_PORT, DEFAULT_OPENAI_PORT

# vllm serve reads its API key from here too.
API_KEY_ENV = "VLLM_API_KEY"


class GatewayError(VllmRepoError):
    """The gateway could not start."""


class StreamSocketMode(str, enum.Enum):
    """Whether streamed responses may come over the gateway's stream socket (vllm_repo.serve.openai.stream_socket)."""

    AUTO = "auto"  # when Triton's address is a loopback one: the backend is on this host
    ON = "on"  # offered whatever the address; a backend that cannot reach it answers through Triton
    OFF = "off"  # every byte through Triton


def offers_stream_socket(mode: StreamSocketMode, triton: str) -> bool:
    if mode is not StreamSocketMode.AUTO:
        return mode is StreamSocketMode.ON
    host = urlsplit(f"grpc://{triton}").hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def open_stream_socket(mode: StreamSocketMode, triton: str) -> StreamSocket | None:
    """The stream socket, when it is offered and can be made; without it every byte goes through Triton."""
    if not offers_stream_socket(mode, triton):
        return None
    try:
        return await StreamSocket().start()
    except OSError as exc:  # e.g. a temporary directory whose path is too long for a Unix socket
        print(f"warning: no stream socket ({exc}): streamed answers go through Triton", file=sys.stderr, flush=True)
        return None


def _triton_url_parts(triton_url: str) -> tuple[str, str, int | None]:
    """(scheme, host as it goes in an address, port or None) of what users pass as --triton-url."""
    url = triton_url if "://" in triton_url else f"grpc://{triton_url}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "grpc") or not parts.hostname:
        raise UsageError(
            f"--triton-url {triton_url!r} is not a Triton address",
            hint="give http://HOST:8000 (gRPC then at HOST:8001, or --triton-grpc-port), or grpc://HOST:8001",
        )
    try:
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"--triton-url {triton_url!r}: {exc}") from exc
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return parts.scheme, host, port


def grpc_address(triton_url: str, grpc_port: int | None = None) -> str:
    """Triton's gRPC address from what users pass: ``http://HOST:8000`` (the server they know; its gRPC endpoint is
    on HOST at ``grpc_port``, Triton's 8001 by default), ``grpc://HOST:PORT`` or ``HOST:PORT``."""
    scheme, host, port = _triton_url_parts(triton_url)
    if scheme == "http" or port is None:
        port = grpc_port or DEFAULT_GRPC_PORT
    return f"{host}:{port}"


def metrics_url(triton_url: str, metrics_port: int | None = None) -> str:
    """Triton's metrics endpoint on the host of ``triton_url``, at ``metrics_port`` (Triton's 8002 by default)."""
    _, host, _ = _triton_url_parts(triton_url)
    return f"http://{host}:{metrics_port or DEFAULT_METRICS_PORT}/metrics"


def base_url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    return f"http://{shown}:{port}/v1"


async def serve(
    triton: str,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_OPENAI_PORT,
    api_keys: list[str] | None = None,
    *,
    stream_socket: StreamSocketMode = StreamSocketMode.AUTO,
    cors: CorsPolicy | None = None,
    metrics: str | None = None,
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve until ``stop`` is set (or the task is cancelled). ``triton``: its gRPC address (grpc_address());
    ``metrics``: its metrics endpoint (metrics_url()), served at /metrics."""
    streams = await open_stream_socket(stream_socket, triton)
    try:
        gateway = OpenAIGateway(TritonOpenAIClient(triton), api_keys, streams, cors, metrics)
        await _serve(gateway, host, port, on_ready, stop)
    finally:
        if streams is not None:
            await streams.close()


async def _serve(
    gateway: OpenAIGateway,
    host: str,
    port: int,
    on_ready: Callable[[str], None] | None,
    stop: asyncio.Event | None,
) -> None:
    # A client that goes away cancels its handler, and the handler its Triton stream: the engine stops generating.
    runner = web.AppRunner(gateway.application(), handler_cancellation=True, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            raise GatewayError(
                f"the OpenAI API cannot listen on {host}:{port}: {exc.strerror or exc}",
                hint="stop whatever listens there, or choose another port (--port / --openai-port)",
            ) from exc
        if on_ready:
            on_ready(base_url(host, port))
        await (stop or asyncio.Event()).wait()
    finally:
        await runner.cleanup()


def run_gateway(
    triton: str,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_OPENAI_PORT,
    api_keys: list[str] | None = None,
    on_ready: Callable[[str], None] | None = None,
    stream_socket: StreamSocketMode = StreamSocketMode.AUTO,
    cors: CorsPolicy | None = None,
    metrics: str | None = None,
) -> int:
    """Serve in this thread until SIGINT or SIGTERM; returns the exit status."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        await serve(
            triton,
            host,
            port,
            api_keys,
            stream_socket=stream_socket,
            cors=cors,
            metrics=metrics,
            on_ready=on_ready,
            stop=stop,
        )

    asyncio.run(main())
    return 0


def print_ready(url: str) -> None:
    print(f"OpenAI API on {url}", file=sys.stderr, flush=True)
