"""The gateway refuses a port something else listens on with a GatewayError that names the address and what to do,
instead of aiohttp's OSError traceback."""

from __future__ import annotations

import asyncio
import socket

import pytest

from vllm_repo.errors import VllmRepoError
from vllm_repo.serve.openai.gateway import GatewayError, StreamSocketMode, serve


def test_a_port_in_use_is_a_gateway_error_naming_it_and_the_way_out():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ready: list[str] = []
        with pytest.raises(GatewayError) as caught:
            # Triton's address is not dialled before the listen: nothing needs to answer there.
            asyncio.run(serve("127.0.0.1:1", "127.0.0.1", port, stream_socket=StreamSocketMode.OFF,
                              on_ready=ready.append))  # fmt: skip
    error = caught.value
    assert isinstance(error, VllmRepoError)  # printed by the CLI's one handler, with its hint and exit code
    assert f"127.0.0.1:{port}" in str(error)
    assert "--openai-port" in (error.hint or "")
    assert ready == []  # never announced as ready
