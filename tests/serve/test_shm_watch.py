"""SharedMemoryWatch: what a process group mapped in /dev/shm and left behind is removed; nothing else is."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vllm_repo.serve.processes import process_group_members
from vllm_repo.serve.shm_watch import SharedMemoryWatch

DEV_SHM = Path("/dev/shm")
pytestmark = pytest.mark.skipif(not DEV_SHM.is_dir(), reason="needs /dev/shm (Linux)")

# Maps a new /dev/shm file, says so, then waits to be killed: what a vLLM process does with its message queues.
HOLDER = r"""
import mmap, os, sys, time
path = sys.argv[1]
fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
os.ftruncate(fd, 1 << 20)
region = mmap.mmap(fd, 1 << 20)
region[:5] = b"hello"
print("mapped", flush=True)
time.sleep(600)
"""


def hold(name: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(DEV_SHM / name)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout.readline().strip() == "mapped"
    return proc


def kill_group(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 10
    while process_group_members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_a_segment_the_group_mapped_and_left_is_removed_others_are_not():
    tag = secrets.token_hex(4)
    ours, theirs, unrelated = f"psm_test_{tag}_ours", f"psm_test_{tag}_theirs", f"psm_test_{tag}_unrelated"
    server = hold(ours)
    other = hold(theirs)  # another program's segment, still in use
    try:
        watch = SharedMemoryWatch(server.pid)
        watch.poll()
        kill_group(server)  # killed without cleaning up: the segment stays
        (DEV_SHM / unrelated).write_bytes(b"x")  # someone else's, never used by the group
        assert (DEV_SHM / ours).exists()

        removed = watch.remove_leftovers()

        assert removed == [ours]
        assert not (DEV_SHM / ours).exists()
        assert (DEV_SHM / theirs).exists() and (DEV_SHM / unrelated).exists()
    finally:
        for proc in (server, other):
            if proc.poll() is None:
                kill_group(proc)
        for name in (ours, theirs, unrelated):
            (DEV_SHM / name).unlink(missing_ok=True)


# Starts HOLDER in a process group of its own, as ENGINE_PROCESS's engine process makes one, and says its pid.
STARTER = r"""
import subprocess, sys
code = "import os; os.setpgid(0, 0)\n" + sys.argv[2]
child = subprocess.Popen([sys.executable, "-c", code, sys.argv[1]], stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), child.pid, flush=True)
child.wait()
"""


def test_a_segment_of_a_group_started_in_the_group_is_removed_too():
    """A member's child that leads a group of its own (the engine process) is the server's: what it mapped and left
    is removed, though it was never a member of the server's group."""
    name = f"psm_test_{secrets.token_hex(4)}_engine"
    server = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(DEV_SHM / name), HOLDER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    engine = None
    try:
        said, pid = server.stdout.readline().split()
        assert said == "mapped"
        engine = int(pid)
        assert os.getpgid(engine) == engine != server.pid
        watch = SharedMemoryWatch(server.pid)
        watch.poll()
        assert engine in watch.groups
        os.killpg(engine, signal.SIGKILL)  # killed outright: the segment stays
        kill_group(server)
        assert watch.remove_leftovers() == [name]
        assert not (DEV_SHM / name).exists()
    finally:
        if engine is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(engine, signal.SIGKILL)
        if server.poll() is None:
            kill_group(server)
        (DEV_SHM / name).unlink(missing_ok=True)


def test_a_segment_still_used_by_a_survivor_is_kept():
    """A process of the group that escaped (or a client sharing the segment) still maps it: not removed."""
    tag = secrets.token_hex(4)
    name = f"psm_test_{tag}_shared"
    server = hold(name)
    reader = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(DEV_SHM / name)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert reader.stdout.readline().strip() == "mapped"
        watch = SharedMemoryWatch(server.pid)
        watch.poll()
        kill_group(server)
        assert watch.remove_leftovers() == []
        assert (DEV_SHM / name).exists()
    finally:
        for proc in (server, reader):
            if proc.poll() is None:
                kill_group(proc)
        (DEV_SHM / name).unlink(missing_ok=True)


def test_a_segment_made_while_the_group_shuts_down_is_caught_by_background_polling():
    tag = secrets.token_hex(4)
    name = f"psm_test_{tag}_late"
    # Starts mapping a moment after it is launched, as an engine process does while it is being stopped.
    late = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(0.5)\n" + HOLDER, str(DEV_SHM / name)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        watch = SharedMemoryWatch(late.pid)
        watch.poll()  # nothing mapped yet
        with watch.polling(interval_s=0.05):
            assert late.stdout.readline().strip() == "mapped"
            time.sleep(0.3)
            kill_group(late)
        assert watch.remove_leftovers() == [name]
    finally:
        if late.poll() is None:
            kill_group(late)
        (DEV_SHM / name).unlink(missing_ok=True)
