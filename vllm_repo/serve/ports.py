"""Triton's ports: the defaults every serving command uses, whether a port can be listened on now, and free ones
picked and held for a server (claims.py: no other vllm-repo process picks a port this one holds)."""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import Iterable
from pathlib import Path

from vllm_repo.serve.claims import held_elsewhere, held_here, hold_port
from vllm_repo.serve.errors import LaunchError

DEFAULT_HTTP_PORT = 8000
DEFAULT_GRPC_PORT = 8001
DEFAULT_METRICS_PORT = 8002
# The OpenAI API (launch --openai-port, vllm-repo openai): beside Triton's, where vllm serve's 8000 is taken.
DEFAULT_OPENAI_PORT = 9000
DEFAULT_HOST = "127.0.0.1"
DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_HTTP_PORT}"


# Where the kernel picks the port of a socket bound to port 0 or connected without a bind, when it cannot say: Linux's
# default range (macOS and the BSDs use 49152-65535, inside it).
DEFAULT_EPHEMERAL_RANGE = (32768, 60999)
# Below this are the ports other services expect to find free: the well-known and registered ones (8000-8002 and
# 9000 among them), and Ray's, whose workers take 10002-19999 by default (Ray refuses a GCS port among them).
LOWEST_PICKED_PORT = 20000
# Ports tried at random outside the kernel's range before falling back to the kernel's own pick.
PICK_ATTEMPTS = 500
# Its own generator, seeded from the OS: a caller's random.seed() must not give two processes the same ports.
_rng = random.Random()


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for ports it picks itself (Linux's ip_local_port_range)."""
    try:
        low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_RANGE
    return low, high


def ports_outside_ephemeral() -> list[int]:
    """The ports free_ports picks from: from LOWEST_PICKED_PORT up, less the kernel's range."""
    low, high = ephemeral_port_range()
    return [*range(LOWEST_PICKED_PORT, low), *range(high + 1, 65536)]


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def free_ports(count: int, host: str = "127.0.0.1", avoid: Iterable[int] = (), *, hold: bool = False) -> list[int]:
    """``count`` distinct TCP ports free on ``host`` now, none of ``avoid`` and none that another vllm-repo process
    holds (claims.hold_port). With ``hold`` this process holds them when they are returned, until claims.release_ports:
    another vllm-repo process starting a server at the same moment picks others.

    Picked outside the kernel's ephemeral range: a port there that is free now can be handed by the kernel to any
    socket before our server binds it. vLLM binds port 0 for torch.distributed's store while Triton loads the model,
    which Triton does before it listens on its own ports, and every outgoing connection takes one too: either took a
    port picked earlier and the server died at start ("already in use"). Each port is held open while the next is
    picked, so no two are the same."""
    avoided = set(avoid)
    candidates = ports_outside_ephemeral()
    with contextlib.ExitStack() as held:
        ports: list[int] = []
        for _ in range(PICK_ATTEMPTS if candidates else 0):
            if len(ports) == count:
                return ports
            port = _rng.choice(candidates)
            if port in avoided or port in ports:
                continue
            s = held.enter_context(socket.socket(_family(host), socket.SOCK_STREAM))
            try:
                s.bind((host, port))  # no SO_REUSEADDR: a port still in TIME_WAIT is passed over too
            except OSError:
                continue
            if _take(port, hold):
                ports.append(port)
        # Nearly every port outside the kernel's range is taken (or it has none): the kernel picks the rest.
        while len(ports) < count:
            s = held.enter_context(socket.socket(_family(host), socket.SOCK_STREAM))
            s.bind((host, 0))
            port = s.getsockname()[1]
            if port not in avoided and _take(port, hold):
                ports.append(port)
        return ports


def _take(port: int, hold: bool) -> bool:
    """Whether ``port`` may be picked: held by no other vllm-repo process (with ``hold``: now held by this one). One
    this process holds already is another of its servers': passed over too."""
    if held_here(port):
        return False
    if not hold:
        return not held_elsewhere(port)
    return hold_port(port)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (see free_ports)."""
    return free_ports(1, host)[0]


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``port`` now. SO_REUSEADDR as servers set it: a port whose last connection
    is in TIME_WAIT is free for a new listener."""
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


PORT_OPTIONS = {"HTTP": "--http-port", "gRPC": "--grpc-port", "metrics": "--metrics-port", "OpenAI": "--openai-port"}


def pick_ports(host: str, ports: dict[str, int]) -> tuple[dict[str, int], list[int]]:
    """``ports`` (label -> port) with each 0 replaced by a free port, held for this process (claims.release_ports lets
    them go); and the ports picked."""
    wanted = [label for label, port in ports.items() if port == 0]
    if not wanted:
        return dict(ports), []
    picked = free_ports(len(wanted), host, avoid=[p for p in ports.values() if p], hold=True)
    return {**ports, **dict(zip(wanted, picked, strict=True))}, picked


def check_ports(host: str, ports: dict[str, int]) -> None:
    seen: dict[int, str] = {}
    for label, port in ports.items():
        if not 0 < port < 65536:
            raise LaunchError(f"{label} port {port} is not a TCP port number (1-65535; 0 picks a free one)")
        if port in seen:
            raise LaunchError(
                f"{label} port {port} is also the {seen[port]} port",
                hint="give each of --http-port, --grpc-port, --metrics-port (and --openai-port) its own port",
            )
        seen[port] = label
        if held_elsewhere(port):
            raise LaunchError(
                f"{label} port {port} is held by another vllm-repo server on this machine (starting or serving)",
                hint=f"choose another port with {PORT_OPTIONS[label]} N, or {PORT_OPTIONS[label]} 0 to have one picked",
            )
        if not port_is_free(port, host):
            option = PORT_OPTIONS[label]
            raise LaunchError(
                f"{label} port {port} on {host} is already in use (another Triton server?)",
                hint=f"stop whatever listens there, or choose another port with {option} N ({option} 0 picks one)",
            )
