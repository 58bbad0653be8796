"""The servers' CPU by process role (server_cpu.py): the roles' names, and real processes measured through /proc."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest

from tests.support.launch import kill_groups
from vllm_repo.benchmark.server_cpu import ServerCpu, role_of
from vllm_repo.serve.processes import groups_started_in

SPIN = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass"


@pytest.mark.parametrize(
    ("command_line", "name", "role"),
    [
        ("python3 -m vllm_repo_backend.engine_process /tmp/e.sock 0a /repo/llm/1 {}", "python3", "engine process"),
        # The stub lives under tritonserver's own directory: it is the stub, not the server.
        ("/opt/tritonserver/backends/python/triton_python_backend_stub /repo/llm/1/model.py x", "triton_python_b",
         "Python backend stub"),
        ("/opt/tritonserver/bin/tritonserver --model-repository=/repo", "tritonserver", "tritonserver"),
        ("VLLM::EngineCore", "VLLM::EngineCor", "EngineCore"),
        ("/usr/bin/python3 -m vllm.entrypoints.openai.api_server --model m", "python3", "vllm serve API server"),
        ("/usr/bin/python3 -m vllm_repo openai --triton-url grpc://127.0.0.1:8001", "python3", "OpenAI gateway"),
        ("/usr/bin/python3 -m something.else", "python3", "python3"),
    ],
)  # fmt: skip
def test_a_process_is_named_by_its_role_or_else_by_its_own_name(command_line, name, role):
    assert role_of(command_line, name) == role


def _start_family() -> subprocess.Popen:
    """A server's stand-in: a session leader that sleeps, whose child spins in a process group of its own (as the
    engine process does under the stub), named as the engine process is."""
    leader = textwrap.dedent(
        f"""
        import subprocess, sys, time
        marker = "vllm_repo_backend." + "engine_process"  # in the child's command line, not in this one's
        subprocess.Popen([sys.executable, "-c", {SPIN!r}, marker], process_group=0)
        time.sleep(30)
        """
    )
    return subprocess.Popen([sys.executable, "-c", leader], start_new_session=True)


def test_the_family_of_a_server_is_measured_by_role_and_nothing_else():
    family = _start_family()
    outsider = subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True)  # busy, but no member
    try:
        time.sleep(1.0)  # the leader has started its child
        meter = ServerCpu([family.pid])
        meter.start()
        time.sleep(1.5)
        used = meter.stop()
    finally:
        kill_groups(groups_started_in(family.pid))
        outsider.kill()
        family.wait()
        outsider.wait()
    # The spinning child, in a group of its own under the leader; the sleeping leader by its name; the outsider's
    # spinning, nobody's.
    assert len(used) == 2 and used["engine process"] > 0.2, used  # a spinning process, on 2 busy cores too
    assert next(value for role, value in used.items() if role != "engine process") < 0.1, used


def test_without_a_server_nothing_is_measured():
    meter = ServerCpu([])
    meter.start()
    assert meter.stop() == {}
