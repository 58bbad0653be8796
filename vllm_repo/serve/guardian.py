"""A guardian process that stops the server group if its owner (launch, or any program that started a TritonServer)
dies without stopping it (SIGKILL, the OOM killer, a killed test runner): no signal handler runs then, so nothing
else would.

The guardian runs in its own session and holds the read end of a pipe whose write end only the owner has. When the owner
stops the server normally it writes "done" and the guardian exits quietly. When the owner dies, the pipe closes without
"done": the guardian sends SIGTERM to the server's process group and the groups started in it (ENGINE_PROCESS's engine
process leads its own), SIGKILL to what is left after a grace period, and removes Triton's shared-memory regions (named
with the server's unique prefix) and the files a normal stop would have removed (the server's work directory, launch's
own log).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

_GUARDIAN = r"""
import os, shutil, signal, sys, time
groups, prefix, grace, remove = {int(g) for g in sys.argv[1].split(",")}, sys.argv[2], float(sys.argv[3]), sys.argv[4:]
signal.signal(signal.SIGINT, signal.SIG_IGN)
lines = sys.stdin.read().splitlines()
if lines and lines[-1].strip() == "done":
    sys.exit(0)
remove += [line[len("remove "):] for line in lines if line.startswith("remove ")]

def table():
    # pid -> the stat fields after the command name: state, ppid, pgrp, ...
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            found[int(entry)] = stat[stat.rfind(")") + 2:].split()
    return found

def members():
    return [pid for pid, fields in table().items()
            if int(fields[2]) in groups and (fields[0] not in ("Z", "X") or threads_running(pid))]

def add_started_groups():
    # Groups led by a child of a member (ENGINE_PROCESS's engine process leads its own), found while their
    # starters still run, as processes.groups_started_in does.
    while True:
        now = table()
        pids = {pid for pid, fields in now.items() if int(fields[2]) in groups}
        led = {pid for pid, fields in now.items() if int(fields[1]) in pids and int(fields[2]) == pid} - groups
        if not led:
            return
        groups.update(led)

def threads_running(pid):
    # A process whose main thread ended shows as a zombie while its other threads may still run (processes.py).
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if stat[stat.rfind(")") + 2:stat.rfind(")") + 3] not in ("Z", "X"):
            return True
    return False

add_started_groups()
if members():
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while members() and time.monotonic() < deadline:
            time.sleep(0.2)
        if not members():
            break
if prefix and os.path.isdir("/dev/shm"):
    for name in os.listdir("/dev/shm"):
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass
for path in remove:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass
"""


class Guardian:
    def __init__(
        self,
        pgid: int,
        shm_prefix: str | None,
        grace_s: float = 20.0,
        remove: Sequence[Path] = (),
        also: Sequence[int] = (),
    ) -> None:
        """``shm_prefix``: Triton's shared-memory regions to remove, by name (None: the group names none);
        ``remove``: files and directories to delete once the group is stopped (only if its owner died); ``also``:
        more process groups to stop with it (the OpenAI gateway's: a group cannot span sessions, and the server
        has a session of its own)."""
        groups = ",".join(str(g) for g in (pgid, *also))
        self.process = subprocess.Popen(
            [sys.executable, "-I", "-c", _GUARDIAN, groups, shm_prefix or "", str(grace_s), *map(str, remove)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )

    def remove_too(self, path: Path) -> None:
        """Remove ``path`` as well, should the owner die: what the server made once it ran."""
        assert self.process.stdin is not None  # started with stdin=subprocess.PIPE
        try:
            self.process.stdin.write(f"remove {path}\n".encode())
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def release(self) -> None:
        """The server was stopped normally: let the guardian go without touching anything."""
        assert self.process.stdin is not None  # started with stdin=subprocess.PIPE
        try:
            self.process.stdin.write(b"done\n")
            self.process.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
