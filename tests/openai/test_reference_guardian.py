"""The reference server's guardian: a killed test runner leaves no `vllm serve` behind. A stand-in for the serving
Python (a shell that starts a child and sleeps) keeps this fast; the real server is exercised in test_reference.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.lib.reference_server import ReferenceServer
from vllm_repo.serve.processes import process_group_members

ROOT = Path(__file__).resolve().parents[2]
OWNER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from bench.lib.reference_server import ReferenceServer
server = ReferenceServer(sys.argv[1], Path(sys.argv[2]), settings={})
server.start()
print(server.pgid, server.workdir, flush=True)
time.sleep(600)
"""


def stand_in_python(tmp_path: Path) -> Path:
    script = tmp_path / "python"
    script.write_text("#!/bin/sh\nsleep 600 &\nexec sleep 600\n")
    script.chmod(0o755)
    return script


def wait_for(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_when_the_program_that_started_it_is_killed_the_reference_group_stops_and_its_directory_goes(tmp_path):
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(stand_in_python(tmp_path)), str(tmp_path), str(ROOT)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    pgid_text, workdir = owner.stdout.readline().split()
    pgid = int(pgid_text)
    try:
        assert wait_for(lambda: len(process_group_members(pgid)) == 2)
        os.killpg(owner.pid, signal.SIGKILL)  # no stop(), no finalizer: what a killed test runner leaves
        owner.wait(timeout=10)
        assert wait_for(lambda: process_group_members(pgid) == [])
        assert wait_for(lambda: not Path(workdir).exists())
    finally:
        for group in (owner.pid, pgid):
            if process_group_members(group):
                os.killpg(group, signal.SIGKILL)


def test_a_normal_stop_lets_the_reference_guardian_go(tmp_path):
    server = ReferenceServer(stand_in_python(tmp_path), tmp_path, settings={}).start()
    guardian = server.guardian
    assert guardian is not None and guardian.process.poll() is None
    assert wait_for(lambda: len(process_group_members(server.pgid)) == 2)
    server.stop(timeout=5)
    assert guardian.process.returncode == 0 and server.guardian is None
    assert process_group_members(server.pgid) == []
