"""Guardian: stops a server group when launch dies (its pipe closes without "done"), and leaves it alone otherwise."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.launch import kill_groups
from vllm_repo.serve.guardian import Guardian
from vllm_repo.serve.processes import groups_started_in, process_group_members, process_table

# A "server" that ignores nothing and starts a child in its group, like tritonserver and its stub.
SERVER = (
    "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
    "time.sleep(600)"
)


def start_group() -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", SERVER], start_new_session=True)
    deadline = time.monotonic() + 10
    while len(process_group_members(proc.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(process_group_members(proc.pid)) == 2
    return proc


def test_when_launch_dies_the_guardian_stops_the_group_and_removes_tritons_regions(tmp_path):
    server = start_group()
    prefix = f"vllm_repo_test_{os.getpid()}_guardian_"
    region = Path("/dev/shm") / f"{prefix}region"
    region.write_bytes(b"x")
    workdir, log = tmp_path / "vllm-repo-triton-x", tmp_path / "launch.log"
    (workdir / "backends" / "vllm").mkdir(parents=True)
    log.write_text("I1201 server log\n")
    try:
        guardian = Guardian(server.pid, prefix, grace_s=5, remove=[workdir, log])
        guardian.process.stdin.close()  # what launch's death looks like from the guardian's side
        guardian.process.wait(timeout=30)
        server.wait(timeout=10)
        assert process_group_members(server.pid) == []
        assert not region.exists()
        assert not workdir.exists() and not log.exists()  # what launch would have removed at a normal stop
    finally:
        region.unlink(missing_ok=True)
        if process_group_members(server.pid):
            os.killpg(server.pid, signal.SIGKILL)


def test_after_a_normal_stop_the_guardian_touches_nothing(tmp_path):
    server = start_group()
    kept = tmp_path / "log"
    kept.write_text("x")
    try:
        guardian = Guardian(server.pid, "vllm_repo_test_unused_", grace_s=5, remove=[kept])
        guardian.release()
        assert kept.exists()
        assert guardian.process.returncode == 0
        time.sleep(0.3)
        assert len(process_group_members(server.pid)) == 2  # still running: only launch decides to stop it
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=10)


def test_the_guardian_also_stops_the_gateways_group():
    # launch --openai-port: the gateway has a process group (and session) of its own beside the server's.
    server, gateway = start_group(), start_group()
    try:
        guardian = Guardian(server.pid, "vllm_repo_test_unused_", grace_s=5, also=[gateway.pid])
        guardian.process.stdin.close()
        guardian.process.wait(timeout=30)
        server.wait(timeout=10)
        gateway.wait(timeout=10)
        assert process_group_members(server.pid) == [] and process_group_members(gateway.pid) == []
    finally:
        for group in (server, gateway):
            if process_group_members(group.pid):
                os.killpg(group.pid, signal.SIGKILL)


def test_a_guardian_with_no_prefix_stops_the_group_and_removes_no_shared_memory(tmp_path):
    # An empty prefix would name every segment on the machine: other servers' regions must stay.
    server = start_group()
    region = Path("/dev/shm") / f"vllm_repo_test_{os.getpid()}_someone_elses"
    region.write_bytes(b"x")
    try:
        guardian = Guardian(server.pid, None, grace_s=5)
        guardian.process.stdin.close()
        guardian.process.wait(timeout=30)
        server.wait(timeout=10)
        assert process_group_members(server.pid) == []
        assert region.exists()
    finally:
        region.unlink(missing_ok=True)
        if process_group_members(server.pid):
            os.killpg(server.pid, signal.SIGKILL)


def test_the_guardian_stops_a_group_started_in_the_servers_group_that_ignores_sigterm():
    # ENGINE_PROCESS's engine process leads a group of its own under the stub; one stuck in its teardown ignores
    # SIGTERM, and the stub's death with it.
    engine = "import os, signal, time; os.setpgid(0, 0); signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    server = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {engine!r}]); "
         "time.sleep(600)"],
        start_new_session=True,
    )  # fmt: skip
    groups: set[int] = set()
    try:
        deadline = time.monotonic() + 10
        while len(groups := groups_started_in(server.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(groups) == 2
        owner_dies(server, groups, grace_s=1)
    finally:
        kill_groups(groups | {server.pid})


def test_the_guardian_stops_a_group_whose_starter_has_died():
    # A group started under the server whose leader is gone (ENGINE_PROCESS's engine process killed, its EngineCore
    # left): no member's child leads it any more, but it is still in the server's session.
    engine = (
        "import os, subprocess, sys; os.setpgid(0, 0); "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); os._exit(0)"
    )
    server = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time; "
         f"subprocess.Popen([sys.executable, '-c', {engine!r}]).wait(); time.sleep(600)"],
        start_new_session=True,
    )  # fmt: skip
    groups: set[int] = set()
    try:
        deadline = time.monotonic() + 10
        # The server and the orphan of the engine's group, whose leader has exited and been reaped.
        while time.monotonic() < deadline:
            groups = {int(fields[2]) for _, _, fields in process_table() if int(fields[3]) == server.pid}
            if len(groups) == 2 and all(process_group_members(group) for group in groups):
                break
            time.sleep(0.05)
        assert len(groups) == 2 and groups_started_in(server.pid) == groups
        owner_dies(server, groups, grace_s=5)
    finally:
        kill_groups(groups | {server.pid})


def owner_dies(server: subprocess.Popen, groups: set[int], grace_s: float) -> None:
    """The server's owner dies (the guardian's pipe closes without "done"): no process of ``groups`` may be left."""
    guardian = Guardian(server.pid, None, grace_s=grace_s)
    guardian.process.stdin.close()
    guardian.process.wait(timeout=30)
    server.wait(timeout=10)
    assert {group: members for group in groups if (members := process_group_members(group))} == {}
