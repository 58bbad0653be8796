"""Triton's ports: the defaults every serving command uses, and whether a port can be listened on now."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable

from vllm_repo.serve.errors import LaunchError

DEFAULT_HTTP_PORT = 8000
DEFAULT_GRPC_PORT = 8001
DEFAULT_METRICS_PORT = 8002
# The OpenAI API (launch --openai-port, vllm-repo openai): beside Triton's, where vllm serve's 8000 is taken.
DEFAULT_OPENAI_PORT = 9000
DEFAULT_HOST = "127.0.0.1"
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_HTTP_PORT}"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(count: int, host: str = "127.0.0.1", avoid: Iterable[int] = ()) -> list[int]:
    """``count`` distinct TCP ports free on ``host`` now, none of ``avoid``. Each is held open while the next is
    picked: one free_port() after another may be handed the same port twice."""
    with contextlib.ExitStack() as held:
        ports: list[int] = []
        while len(ports) < count:
            s = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            s.bind((host, 0))
            port = s.getsockname()[1]
            if port not in avoid:
                ports.append(port)
        return ports


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``port`` now. SO_REUSEADDR as servers set it: a port whose last connection
    is in TIME_WAIT is free for a new listener."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def check_ports(host: str, ports: dict[str, int]) -> None:
    seen: dict[int, str] = {}
    for label, port in ports.items():
        if not 0 < port < 65536:
            raise LaunchError(f"{label} port {port} is not a TCP port number (1-65535)")
        if port in seen:
            raise LaunchError(
                f"{label} port {port} is also the {seen[port]} port",
                hint="give each of --http-port, --grpc-port, --metrics-port (and --openai-port) its own port",
            )
        seen[port] = label
        if not port_is_free(port, host):
            option = {
                "HTTP": "--http-port",
                "gRPC": "--grpc-port",
                "metrics": "--metrics-port",
                "OpenAI": "--openai-port",
            }[label]
            raise LaunchError(
                f"{label} port {port} on {host} is already in use (another Triton server?)",
                hint=f"stop whatever listens there, or choose another port with {option} N",
            )
