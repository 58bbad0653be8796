"""vllm_repo.serve.server on the real Triton server, with small Python models (no vLLM: each start takes seconds)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.echo_backend import ECHO_BACKEND, make_repo
from tests.support.serving import SERVING_PYTHON, TRITON_HOME, needs_serving
from vllm_repo.serve.errors import TritonLoadHung, TritonServerError
from vllm_repo.serve.processes import process_group_members, shm_segments
from vllm_repo.serve.python_env import probe_python
from vllm_repo.serve.server import TritonServer
from vllm_repo.serve.server_files import TritonHome, layout_backend_directory

pytestmark = [pytest.mark.e2e, needs_serving]


@pytest.fixture
def echo_backend(tmp_path) -> Path:
    path = tmp_path / "echo_model.py"
    path.write_text(ECHO_BACKEND)
    return path


def generate(server: TritonServer, model: str, text: str) -> dict:
    req = urllib.request.Request(
        f"{server.http_url}/v2/models/{model}/generate",
        data=json.dumps({"text_input": text}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def test_probe_python_reads_version_libdir_and_packages():
    info = probe_python(SERVING_PYTHON)
    assert info.version.count(".") == 1
    assert list(info.libdir.glob(f"libpython{info.version}*.so*"))
    assert info.numpy_version and int(info.numpy_version.split(".")[0]) < 2
    assert info.vllm_version


def test_layout_backend_directory(tmp_path, echo_backend):
    home = TritonHome(Path(TRITON_HOME))
    version = probe_python(SERVING_PYTHON).version
    dest = layout_backend_directory(tmp_path / "b", home, version, backend_source=echo_backend)
    assert sorted(p.name for p in (dest / "python").iterdir()) == [
        "libtriton_python.so",
        "triton_python_backend_stub",
        "triton_python_backend_utils.py",
    ]
    assert os.access(dest / "python" / "triton_python_backend_stub", os.X_OK)
    assert (dest / "vllm" / "model.py").read_text() == ECHO_BACKEND
    with pytest.raises(TritonServerError, match=r"no Python backend stub for Python 2\.7 \(it has: .*3\.11"):
        layout_backend_directory(tmp_path / "c", home, "2.7")
    with pytest.raises(TritonServerError, match="no tritonserver under"):
        layout_backend_directory(tmp_path / "d", TritonHome(tmp_path), version)


def test_start_serve_stop_leaves_nothing(tmp_path, echo_backend):
    repo = make_repo(tmp_path / "repo", "echo")
    with TritonServer(
        repo, serving_python=SERVING_PYTHON, triton_home=TRITON_HOME, backend_source=echo_backend
    ) as server:
        server.wait_ready(timeout=120)
        assert server.host == "127.0.0.1"
        assert generate(server, "echo", "héllo")["text_output"] == "héllo"
        # vLLM's IPC sockets are made in the work directory, which goes with the server.
        rpc = Path(generate(server, "echo", "$VLLM_RPC_BASE_PATH")["text_output"])
        assert rpc.is_dir() and server.work_directory in rpc.parents
        pgid = server.pgid
        assert shm_segments(server.shm_prefix)  # the Python backend's region, under this server's prefix
        workdir = server._own_workdir
    assert server.escalated_to is None, server.log_tail()  # tritonserver's own shutdown took everything down
    assert process_group_members(pgid) == []
    assert shm_segments(server.shm_prefix) == []
    assert not workdir.exists()
    assert "successfully loaded 'echo'" in server.log_text()  # kept after the work directory is gone
    assert server.stop() == 0  # twice is fine


def test_two_servers_side_by_side_get_distinct_ports_and_shm_prefixes(tmp_path, echo_backend):
    repo = make_repo(tmp_path / "repo", "echo")
    kwargs = {"serving_python": SERVING_PYTHON, "triton_home": TRITON_HOME, "backend_source": echo_backend}
    with TritonServer(repo, **kwargs) as a, TritonServer(repo, **kwargs) as b:
        a.wait_ready(120)
        b.wait_ready(120)
        assert a.shm_prefix != b.shm_prefix
        assert {a.http_port, a.grpc_port, a.metrics_port}.isdisjoint({b.http_port, b.grpc_port, b.metrics_port})
        assert generate(a, "echo", "a")["text_output"] == "a"
        assert generate(b, "echo", "b")["text_output"] == "b"


def test_a_model_that_fails_to_load_raises_with_the_servers_reason(tmp_path, echo_backend):
    repo = make_repo(tmp_path / "repo", "FAIL")
    server = TritonServer(repo, serving_python=SERVING_PYTHON, triton_home=TRITON_HOME, backend_source=echo_backend)
    server.start()
    try:
        with pytest.raises(TritonServerError, match=r"(?s)exited with status.*this model refuses to load"):
            server.wait_ready(timeout=120)
    finally:
        server.stop()
    assert process_group_members(server.pgid) == []


def test_a_load_triton_never_finishes_after_the_backends_ready_line_is_named_and_stopped(tmp_path, echo_backend):
    # The echo model logs the bundled backend's ready line and never returns from initialize(): in the log, what Triton
    # 2.51's lost-stub hang leaves (load_hang.py). wait_ready names it after load_hang_s, not at its timeout.
    repo = make_repo(tmp_path / "repo", "HANG")
    server = TritonServer(repo, serving_python=SERVING_PYTHON, triton_home=TRITON_HOME, backend_source=echo_backend)
    server.start()
    began = time.monotonic()
    try:
        with pytest.raises(TritonLoadHung, match=r"not finished loading 'HANG' \d+ s after its backend said") as hung:
            server.wait_ready(timeout=300, load_hang_s=2)
        assert time.monotonic() - began < 120
        assert "line" in str(hung.value) and "restart" in (hung.value.hint or "")
    finally:
        server.stop(timeout=5)
    assert process_group_members(server.pgid) == []


def test_a_load_through_the_model_control_api_that_triton_never_finishes_is_named(tmp_path, echo_backend):
    # The same hang met by an explicit load (tune's reloads): Triton's answer to the load request never comes.
    repo = make_repo(tmp_path / "repo", "HANG")
    server = TritonServer(
        repo, serving_python=SERVING_PYTHON, triton_home=TRITON_HOME, backend_source=echo_backend,
        extra_args=["--model-control-mode=explicit"],
    )  # fmt: skip
    server.start()
    try:
        server.wait_ready(timeout=120)  # nothing is loaded at start
        began = time.monotonic()
        with pytest.raises(TritonLoadHung, match=r"not finished loading 'HANG' \d+ s after its backend said"):
            server.load_model("HANG", timeout=300, load_hang_s=2)
        assert time.monotonic() - began < 120
    finally:
        server.stop(timeout=5)
    assert process_group_members(server.pgid) == []


def test_port_in_use_is_refused_before_starting(tmp_path, echo_backend):
    repo = make_repo(tmp_path / "repo", "echo")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        server = TritonServer(
            repo, serving_python=SERVING_PYTHON, triton_home=TRITON_HOME, http_port=busy.getsockname()[1]
        )
        with pytest.raises(TritonServerError, match=r"HTTP port \d+ on 127.0.0.1 is in use"):
            server.start()
    assert server.process is None


def test_a_caller_blocking_sigterm_still_gets_a_stoppable_server(tmp_path, echo_backend):
    # A launcher that waits for Ctrl-C with sigwait() blocks SIGINT/SIGTERM; children must not inherit that.
    repo = make_repo(tmp_path / "repo", "echo")
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    try:
        with TritonServer(
            repo, serving_python=SERVING_PYTHON, triton_home=TRITON_HOME, backend_source=echo_backend
        ) as server:
            server.wait_ready(120)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    assert server.escalated_to is None, server.log_tail()


# A program that starts a server and is then killed before it can stop it.
OWNER = """
import sys, time
from vllm_repo.serve.server import TritonServer
repo, python, home, backend = sys.argv[1:]
server = TritonServer(repo, serving_python=python, triton_home=home, backend_source=backend).start()
server.wait_ready(120)
print(server.pgid, server.shm_prefix, server.work_directory, flush=True)
time.sleep(600)
"""


def test_a_server_whose_owner_is_killed_is_stopped_by_its_guardian(tmp_path, echo_backend):
    repo = make_repo(tmp_path / "repo", "echo")
    command = [sys.executable, "-c", OWNER, str(repo), SERVING_PYTHON, TRITON_HOME, str(echo_backend)]
    owner = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
    pgid = None
    try:
        pgid, prefix, work = owner.stdout.readline().split()
        pgid = int(pgid)
        assert process_group_members(pgid) and list(shm_segments(prefix))
        os.killpg(owner.pid, signal.SIGKILL)  # no handler runs, no stop()
        owner.wait(timeout=10)
        deadline = time.monotonic() + 45
        while (process_group_members(pgid) or list(shm_segments(prefix)) or Path(work).exists()) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.2)
        assert process_group_members(pgid) == []
        assert list(shm_segments(prefix)) == []
        assert not Path(work).exists()
    finally:
        for group in (owner.pid, pgid):
            if group and process_group_members(group):
                os.killpg(group, signal.SIGKILL)


def test_a_normal_stop_lets_the_guardian_go_and_an_unguarded_server_has_none(tmp_path, echo_backend):
    repo = make_repo(tmp_path / "repo", "echo")
    kwargs = {"serving_python": SERVING_PYTHON, "triton_home": TRITON_HOME, "backend_source": echo_backend}
    with TritonServer(repo, **kwargs) as server:
        server.wait_ready(120)
        guardian = server.guardian
        assert guardian is not None and guardian.process.poll() is None
    assert guardian.process.poll() == 0 and server.guardian is None
    with TritonServer(repo, guard=False, **kwargs) as unguarded:
        assert unguarded.guardian is None
