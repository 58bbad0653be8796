"""finalize's bounded stop of vLLM's engine: its shutdown gets a grace period, then what is left below the stub is
killed and the shared memory those processes had mapped (and only that) is removed."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.waiting import wait_for
from vllm_repo.backend.vllm_repo_backend import engine_stop

# A stand-in stub: it maps a segment of its own (as the stub maps Triton's), then starts an "engine core" that maps
# another, ignores SIGTERM and runs on; the engine core's own child (a "worker") maps the engine's segment too.
STUB = r"""
import signal, subprocess, sys, time
from multiprocessing import shared_memory
own = shared_memory.SharedMemory(name=sys.argv[1], create=True, size=4096)
engine = (
    "import signal, subprocess, sys, time\n"
    "from multiprocessing import shared_memory\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    # Python's resource trackers would remove the segment themselves once the processes that made it die: only
    # engine_stop may, here, or the test could not tell whether it did.
    "from multiprocessing import resource_tracker\n"
    "def untrack(segment): resource_tracker.unregister(segment._name, 'shared_memory')\n"
    "queue = shared_memory.SharedMemory(name=sys.argv[1], create=True, size=4096)\n"
    "untrack(queue)\n"
    # A multiprocessing lock, as vLLM's EngineCore makes: a POSIX semaphore, /dev/shm/sem.mp-*, mapped under the
    # temporary name it was created with (untracked too).
    "import multiprocessing\n"
    "lock = multiprocessing.get_context('spawn').Lock()\n"
    "resource_tracker.unregister(lock._semlock.name, 'semaphore')\n"
    "print('semaphore', lock._semlock.name, flush=True)\n"
    "worker = subprocess.Popen([sys.executable, '-c', 'import sys, time\\n"
    "from multiprocessing import resource_tracker, shared_memory\\n"
    "q = shared_memory.SharedMemory(name=sys.argv[1])\\n"
    "resource_tracker.unregister(q._name, \"shared_memory\")\\n"
    "print(\"worker\", flush=True)\\n"
    "time.sleep(60)', sys.argv[1]])\n"
    "time.sleep(60)\n"
)
core = subprocess.Popen([sys.executable, "-c", engine, sys.argv[2]])
print("core", core.pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def stub(tmp_path):
    own, engine = f"vr_test_stub_{os.getpid()}", f"vr_test_engine_{os.getpid()}"
    process = subprocess.Popen([sys.executable, "-c", STUB, own, engine], stdout=subprocess.PIPE, text=True)
    made: list[Path] = []  # the semaphore, once named
    try:
        said = dict(process.stdout.readline().split(maxsplit=1) for _ in range(2))  # the core and its semaphore
        core, semaphore = int(said["core"]), Path("/dev/shm", "sem." + said["semaphore"].strip().lstrip("/"))
        made.append(semaphore)
        wait_for(lambda: len(engine_stop.descendants(core)) >= 1)  # its worker
        wait_for(lambda: Path("/dev/shm", engine).exists() and Path("/dev/shm", own).exists() and semaphore.exists())
        wait_for(lambda: len(engine_stop.shared_memory_of(engine_stop.descendants(process.pid))) == 2)
        yield process, core, Path("/dev/shm", own), [Path("/dev/shm", engine), semaphore]
    finally:
        for pid in engine_stop.descendants(process.pid):
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        process.kill()
        process.wait()
        for path in (Path("/dev/shm", own), Path("/dev/shm", engine), *made):
            path.unlink(missing_ok=True)


def test_a_shutdown_that_ends_in_time_kills_nothing():
    calls = []
    assert engine_stop.stop_within(lambda: calls.append("shutdown"), grace_s=5) == ([], [])
    assert calls == ["shutdown"]


def test_an_error_from_the_shutdown_is_raised_to_the_caller():
    def shutdown() -> None:
        raise RuntimeError("engine core gone")

    with pytest.raises(RuntimeError, match="engine core gone"):
        engine_stop.stop_within(shutdown, grace_s=5)


def test_after_the_grace_the_engine_processes_are_killed_and_only_their_segments_removed(stub):
    process, core, own_segment, engine_segments = stub
    engine = [core, *engine_stop.descendants(core)]  # the engine core and its worker (and their resource trackers)

    def shutdown() -> None:  # as vLLM's: waits for its engine core, which ignores SIGTERM here
        wait_for(lambda: all(not Path(f"/proc/{pid}").exists() or _zombie(pid) for pid in engine), timeout=30)

    began = time.monotonic()
    killed, removed = engine_stop.stop_within(shutdown, grace_s=0.5, root=process.pid)
    assert time.monotonic() - began < 5
    assert set(engine) <= set(killed)
    assert process.pid not in killed
    assert removed == sorted(map(str, engine_segments))  # the semaphore by its real name, not the one mapped
    assert not any(segment.exists() for segment in engine_segments)
    assert own_segment.exists()  # the stub's own (Triton's, in the real stub) is left alone
    assert process.poll() is None  # and the stub runs on


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
