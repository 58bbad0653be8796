"""Two `vllm-repo launch` of the tiny model started at the same moment on one machine, each picking its own ports
(--http-port 0 ...): both serve, both stop cleanly, and neither touches the other's ports, shared memory or Triton's
/tmp/python_env_* directory (whose loss aborted a server at shutdown: ``fts_read error``, status -6)."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.support.launch import READY_TIMEOUT, Launched, _children, assert_nothing_left, shm_names
from tests.support.serving import NEEDS_SERVING, SERVING_PYTHON, vllm_repo_cli
from vllm_repo.serve.guardian import Guardian
from vllm_repo.serve.infer import infer
from vllm_repo.serve.processes import process_group_members, shm_segments

pytestmark = [NEEDS_SERVING, pytest.mark.e2e]

PORTS = re.compile(
    r"HTTP +http://127\.0\.0\.1:(\d+) .*\n +gRPC +127\.0\.0\.1:(\d+)\n +metrics +http://127\.0\.0\.1:(\d+)/"
)


def launch(repo: Path, log: Path) -> Launched:
    command = vllm_repo_cli(
        "launch", str(repo), "--python", SERVING_PYTHON, "--log-file", str(log),
        "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
    )  # fmt: skip
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    launched = Launched(proc=proc, url="", ports=(0, 0, 0), lines=[], shm_before=shm_names())
    launched.guardian = Guardian(proc.pid, None, grace_s=30)  # should this test die first
    threading.Thread(target=lambda: launched.lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    return launched


def wait_ready(launched: Launched) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while "Triton is ready" not in launched.output:
        assert launched.proc.poll() is None, f"launch exited with {launched.proc.returncode}:\n{launched.output}"
        assert time.monotonic() < deadline, f"not ready after {READY_TIMEOUT} s:\n{launched.output}"
        time.sleep(0.25)
    found = PORTS.search(launched.output)
    assert found, launched.output
    launched.ports = (int(found[1]), int(found[2]), int(found[3]))
    launched.url = f"http://127.0.0.1:{launched.ports[0]}"
    servers = [pid for pid, comm in _children(launched.proc.pid) if comm == "tritonserver"]
    assert len(servers) == 1
    launched.server_pid = servers[0]


def stop(launched: Launched, log: Path) -> None:
    launched.send(signal.SIGTERM)
    code, _ = launched.wait_exit(60)
    assert code == 0, launched.output
    assert "stopped (" in launched.output and "not cleanly" not in launched.output, launched.output
    assert "fts_read" not in log.read_text(), log.read_text()[-3000:]


def answers(launched: Launched) -> bool:
    return bool(infer("tiny", "Hello", url=launched.url, max_tokens=4, params={"ignore_eos": True}).text)


def test_two_launches_started_at_once_serve_and_stop_without_touching_each_other(tiny_repository, tmp_path):
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    a, b = (launch(tiny_repository, log) for log in logs)
    try:
        wait_ready(a)
        wait_ready(b)
        assert set(a.ports).isdisjoint(b.ports)
        assert answers(a) and answers(b)
        b_segments = shm_segments(b.shm_prefix)
        assert b_segments and shm_segments(a.shm_prefix)

        stop(a, logs[0])
        assert process_group_members(a.server_pid) == [] and shm_segments(a.shm_prefix) == []
        # The other serves on, with all its shared memory: its next request, and its own clean stop, need it.
        assert shm_segments(b.shm_prefix) == b_segments
        assert answers(b)

        stop(b, logs[1])
        # Both are gone with everything they made, b's check counting from before either started.
        b.python_envs_before = a.python_envs_before
        b.ports = (*b.ports, *a.ports)
        assert_nothing_left(b)
    finally:
        for launched in (a, b):
            launched.kill_everything()
