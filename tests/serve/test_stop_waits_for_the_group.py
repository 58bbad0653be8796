"""TritonServer.stop and launch's "stopped (N s)": the server's process group counts as gone only once every thread of
every process in it has ended, not once a process's main thread is a zombie while its other threads still run (what a
Python stub or an engine whose main thread returned first looks like in /proc). A fake server, no Triton."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from vllm_repo.serve import launch
from vllm_repo.serve.processes import process_group_members
from vllm_repo.serve.python_env import PythonInfo
from vllm_repo.serve.server import TritonServer
from vllm_repo.serve.server_files import TritonHome

SLOW_EXIT_S = 1.5

# The "server" leads its own process group; its "stub", in the same group, answers SIGTERM by ending its main thread
# (pthread_exit) while another thread goes on for SLOW_EXIT_S: /proc shows the stub's main thread as a zombie (Z)
# until that thread has finished, and only then is the process gone.
FAKE_SERVER = r"""
import ctypes, os, signal, subprocess, sys, threading, time

if sys.argv[1] == "stub":
    def on_term(*_):
        threading.Thread(target=time.sleep, args=(float(sys.argv[3]),)).start()
        ctypes.CDLL(None).pthread_exit(None)

    signal.signal(signal.SIGTERM, on_term)
    with open(sys.argv[2], "w") as ready:
        ready.write(str(os.getpid()))
    time.sleep(120)
else:
    stub = subprocess.Popen([sys.executable, __file__, "stub", sys.argv[2], sys.argv[3]])

    def on_term(*_):
        stub.send_signal(signal.SIGTERM)  # as tritonserver stops its stubs, then exits without waiting for them
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)
    time.sleep(120)
"""


def live_threads(pid: int) -> list[str]:
    """The states of ``pid``'s threads that have not ended (neither zombie nor dead)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    states = []
    for tid in tasks:
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        states.append(stat[stat.rfind(")") + 2])
    return [s for s in states if s not in ("Z", "X")]


def fake_server(tmp_path: Path) -> tuple[TritonServer, int]:
    """A TritonServer whose process is the fake server, started as start() starts tritonserver (a new session); and
    its stub's pid, once the stub has set its handler."""
    script = tmp_path / "fake_server.py"
    script.write_text(FAKE_SERVER)
    ready = tmp_path / "stub.pid"
    python = PythonInfo(Path(sys.executable), "3", Path(sys.prefix) / "lib", None, None)
    server = TritonServer(tmp_path, serving_python=python, triton_home=TritonHome(tmp_path), guard=False)
    server.process = subprocess.Popen(
        [sys.executable, str(script), "server", str(ready), str(SLOW_EXIT_S)], start_new_session=True
    )
    deadline = time.monotonic() + 30
    while not (ready.is_file() and ready.read_text()):
        assert time.monotonic() < deadline, "the fake server's stub did not start"
        time.sleep(0.02)
    return server, int(ready.read_text())


def test_stop_returns_once_the_last_thread_of_the_group_has_ended(tmp_path):
    server, stub = fake_server(tmp_path)
    pgid = server.pgid
    assert pgid is not None
    began = time.monotonic()
    status = server.stop(timeout=20)
    took = time.monotonic() - began
    assert status == 0 and server.escalated_to is None  # it stopped by itself: no signal to the group was needed
    assert live_threads(stub) == [], "stop() returned while the stub's last thread still ran"
    assert process_group_members(pgid) == []
    assert SLOW_EXIT_S - 0.2 <= took < SLOW_EXIT_S + 4, took


def test_launch_says_stopped_after_the_time_the_group_took_to_go(tmp_path):
    server, stub = fake_server(tmp_path)
    out = io.StringIO()
    began = time.monotonic()
    assert launch._shut_down(launch._Running(server=server, ready=True), out) is True
    took = time.monotonic() - began
    said = re.search(r"stopped \((\d+\.\d) s\)\.", out.getvalue())
    assert said, out.getvalue()
    assert float(said.group(1)) >= SLOW_EXIT_S - 0.2, out.getvalue()
    assert abs(float(said.group(1)) - took) < 0.3
    assert live_threads(stub) == []


def test_a_member_whose_main_thread_is_a_zombie_still_counts_while_its_threads_run(tmp_path):
    server, stub = fake_server(tmp_path)
    pgid = server.pgid
    assert pgid is not None
    os.kill(stub, 15)
    deadline = time.monotonic() + 10
    while not Path(f"/proc/{stub}/stat").read_text().split(") ")[1].startswith("Z"):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert live_threads(stub), "the stub's other thread should still run"
    assert stub in process_group_members(pgid)
    server.stop(timeout=20)
