"""ENGINE_PROCESS: where it is the default, and its engine process killed outright while vLLM's EngineCore, forked
from it, lives on holding the engine's end of the connection (seen on an H200: every request hung, the model stayed
ready). Without vLLM: a real process group stands in for the engine's process and its EngineCore."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from multiprocessing import Pipe

from vllm_repo.backend.vllm_repo_backend import engine_link

# The engine's process: a group of its own (as engine_process.main makes it), then a forked child that keeps the
# connection's fd open and outlives it, as vLLM's EngineCore does.
ENGINE = """
import os, sys, time
os.setpgid(0, 0)
if os.fork() == 0:
    time.sleep(120)
    os._exit(0)
print("ready", flush=True)
time.sleep(120)
"""


def group_members(pgid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                found.append(int(entry))
    return found


def test_an_engine_process_that_died_is_seen_though_its_connection_stays_open_and_its_group_is_killed():
    ours, theirs = Pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", ENGINE], pass_fds=[theirs.fileno()], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        theirs.close()
        assert len(group_members(child.pid)) == 2  # the engine's process and its EngineCore
        engine = object.__new__(engine_link.ProcessEngine)
        engine.child, engine.conn, engine.closing, engine.dead_reason = child, ours, False, None
        engine.model_name, engine.health_check, engine.live, engine.accumulator = "m", False, {}, None
        engine._log_start, engine._death_lock = 0, threading.Lock()

        engine._check_alive()
        assert engine.dead_reason is None  # alive: nothing to do

        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
        assert not ours.poll(0.2)  # the EngineCore still holds the other end: no end of file comes
        engine._check_alive()
        assert engine.dead_reason is not None and "was killed by SIGKILL" in engine.dead_reason
        assert ours.closed  # the receiver's wait ends
        deadline = time.monotonic() + 10
        while group_members(child.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert group_members(child.pid) == []  # the EngineCore went with it
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        child.wait(timeout=10)


def test_a_gpu_instance_runs_vllm_in_a_process_of_its_own_unless_config_pbtxt_says_otherwise():
    assert engine_link.wanted({}, "GPU") is True
    assert engine_link.wanted({"ENGINE_PROCESS": "false"}, "GPU") is False
    assert engine_link.wanted({}, "CPU") is False and engine_link.wanted({}, "MODEL") is False
    assert engine_link.wanted({"ENGINE_PROCESS": "true"}, "CPU") is True
