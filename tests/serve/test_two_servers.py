"""Two Triton servers of vllm-repo on one machine, with small Python models (no vLLM: each start takes seconds): each
cleans up only what it made. Triton's Python backend makes a /tmp/python_env_* directory per server and aborts at
shutdown (``fts_read error``, status -6) when another took it away."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.support.echo_backend import ECHO_BACKEND, make_repo
from tests.support.serving import SERVING_PYTHON, TRITON_HOME, needs_serving
from vllm_repo.serve.claims import python_env_dirs, unclaimed_python_envs
from vllm_repo.serve.errors import TritonServerError
from vllm_repo.serve.processes import process_group_members
from vllm_repo.serve.server import TritonServer
from vllm_repo.serve.triton_client import TritonHttp

pytestmark = [pytest.mark.e2e, needs_serving]


@pytest.fixture
def echo_backend(tmp_path) -> Path:
    path = tmp_path / "echo_model.py"
    path.write_text(ECHO_BACKEND)
    return path


def servers(echo_backend, *repos):
    kwargs = {"serving_python": SERVING_PYTHON, "triton_home": TRITON_HOME, "backend_source": echo_backend}
    return [TritonServer(repo, **kwargs) for repo in repos]


def start_at_once(*started: TritonServer) -> None:
    threads = [threading.Thread(target=server.start) for server in started]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert all(server.process is not None for server in started)


def test_a_server_that_failed_or_stopped_leaves_the_other_servers_python_env_alone(tmp_path, echo_backend):
    before = python_env_dirs()
    a, b, failing = servers(
        echo_backend,
        make_repo(tmp_path / "a", "echo"),
        make_repo(tmp_path / "b", "echo"),
        make_repo(tmp_path / "f", "FAIL"),
    )
    try:
        start_at_once(a, b, failing)
        a.wait_ready(120)
        b.wait_ready(120)
        with pytest.raises(TritonServerError, match="refuses to load"):
            failing.wait_ready(120)
        # Each claimed the directory its own backend made: three, none shared, each held while its server lives.
        assert len({a.python_env, b.python_env, failing.python_env} - {None}) == 3
        assert unclaimed_python_envs(before) == set()
        failing.stop()
        assert os.path.isdir(a.python_env) and os.path.isdir(b.python_env)
        assert a.stop() == 0, a.log_tail()  # its backend removed its own directory as it shut down
        assert os.path.isdir(b.python_env)
        assert b.is_ready()
        assert b.stop() == 0, b.log_tail()
        for server in (a, b):
            assert server.escalated_to is None and "fts_read" not in server.log_text(), server.log_tail()
        assert unclaimed_python_envs(before) == set()
    finally:
        for server in (a, b, failing):
            server.stop()


def test_a_server_killed_before_its_shutdown_has_only_its_own_python_env_removed(tmp_path, echo_backend):
    before = python_env_dirs()
    a, b = servers(echo_backend, make_repo(tmp_path / "a", "echo"), make_repo(tmp_path / "b", "echo"))
    try:
        start_at_once(a, b)
        a.wait_ready(120)
        b.wait_ready(120)
        mine, theirs = a.python_env, b.python_env
        assert mine and theirs and mine != theirs
        os.killpg(a.pgid, signal.SIGKILL)  # no shutdown: its backend cannot remove its directory
        a.started.wait(10)
        assert os.path.isdir(mine)
        a.stop()
        assert process_group_members(a.started.pid) == []
        assert not os.path.exists(mine) and os.path.isdir(theirs)
        assert b.stop() == 0 and "fts_read" not in b.log_text(), b.log_tail()
        assert unclaimed_python_envs(before) == set()
    finally:
        for server in (a, b):
            server.stop()


def test_a_server_started_with_no_model_claims_the_python_env_its_first_load_makes(tmp_path, echo_backend):
    before = python_env_dirs()
    kwargs = {"serving_python": SERVING_PYTHON, "triton_home": TRITON_HOME, "backend_source": echo_backend}
    server = TritonServer(make_repo(tmp_path / "a", "echo"), extra_args=["--model-control-mode=explicit"], **kwargs)
    try:
        server.start()
        server.wait_ready(120)
        # No Python model loaded: the backend has made no directory yet (one made would be held by no one). Servers
        # of other test workers may make theirs meanwhile: each is held by its own server.
        assert server.python_env is None and unclaimed_python_envs(before) == set()
        server.load_model("echo", timeout=120)
        made = server.python_env
        assert made is not None and made in python_env_dirs() - before
        assert unclaimed_python_envs(before) == set()  # held while the server lives
        # Unloaded and loaded again (tune's reload): whichever directory the backend has then is held.
        TritonHttp(server.http_url).unload_model("echo", timeout=60)
        deadline = time.monotonic() + 60
        while server.model_ready("echo") and time.monotonic() < deadline:
            time.sleep(0.2)
        server.load_model("echo", timeout=120)
        made = server.python_env
        assert made is not None and os.path.isdir(made) and unclaimed_python_envs(before) == set()
        os.killpg(server.pgid, signal.SIGKILL)  # no shutdown: its backend cannot remove its directory
        server.started.wait(10)
        server.stop()
        assert not os.path.exists(made) and unclaimed_python_envs(before) == set()
    finally:
        server.stop()
