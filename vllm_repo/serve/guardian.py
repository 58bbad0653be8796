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

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import vllm_repo
from vllm_repo.serve.processes import groups_members, groups_started_in, shm_segments, signal_group

# The guardian's own Python: isolated from the environment (-I), with this package found where the owner found it.
_START = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); from vllm_repo.serve.guardian import main; main(sys.argv[1:])"
)
# The owner's last word on a normal stop; "remove PATH" lines before it add files to remove should it die.
_DONE, _REMOVE = "done", "remove "


def guard(groups: set[int], shm_prefix: str, grace_s: float, remove: list[str], owner: TextIO) -> None:
    """The guardian's work: wait for the owner's end of the pipe to close; unless it said "done", stop ``groups``
    and the groups started in them, then remove Triton's regions named ``shm_prefix`` and the paths in ``remove``."""
    lines = owner.read().splitlines()
    if lines and lines[-1].strip() == _DONE:
        return
    remove += [line[len(_REMOVE) :] for line in lines if line.startswith(_REMOVE)]
    groups = groups_started_in(groups)  # read once, before any of them is signalled
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        if not groups_members(groups):
            break
        for pgid in groups:
            signal_group(pgid, sig)
        deadline = time.monotonic() + wait
        while groups_members(groups) and time.monotonic() < deadline:
            time.sleep(0.2)
    for segment in shm_segments(shm_prefix) if shm_prefix else []:
        segment.unlink(missing_ok=True)
    for path in remove:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


def main(argv: list[str]) -> None:
    """``GROUPS PREFIX GRACE_S [REMOVE...]``, the owner's pipe on stdin (Guardian starts it so)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the owner's terminal is not for the guardian
    groups = {int(group) for group in argv[0].split(",")}
    guard(groups, argv[1], float(argv[2]), argv[3:], sys.stdin)


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
            [
                *(sys.executable, "-I", "-c", _START, str(Path(vllm_repo.__file__).parents[1])),
                *(groups, shm_prefix or "", str(grace_s), *map(str, remove)),
            ],
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
            self.process.stdin.write(f"{_REMOVE}{path}\n".encode())
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass

    def release(self) -> None:
        """The server was stopped normally: let the guardian go without touching anything."""
        assert self.process.stdin is not None  # started with stdin=subprocess.PIPE
        try:
            self.process.stdin.write(f"{_DONE}\n".encode())
            self.process.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
