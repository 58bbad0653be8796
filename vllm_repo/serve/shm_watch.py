"""Shared memory a server's process group used, so that none of it outlives the server.

Triton's own regions carry the server's unique prefix and are removed by name. vLLM and Python's multiprocessing make
others with random names (psm_*, sem.mp-*: 160 and 240 MiB segments for the engine's message queues); they are
normally unlinked by their owner or by multiprocessing's resource tracker, but a process stopped at the wrong moment
(a Ctrl-C while the engine starts) can leave them behind. This watch notes every /dev/shm file that a member of the
group, or of a group one of them started (ENGINE_PROCESS's engine process leads its own), maps or holds open while it
runs; after the group is gone, whichever of those files still exists and is used by
no live process is removed. Files are matched by inode (a semaphore is mapped under the temporary name it was created
with, then linked to its real name), and a file created after the watch last saw that inode is never touched.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

from vllm_repo.serve.processes import DEV_SHM, groups_members, groups_started_in

_CTIME_SLACK_S = 30.0


def _shm_inodes(pid: int | str) -> set[int]:
    """Inodes of /dev/shm files process ``pid`` maps or holds open."""
    proc = Path("/proc") / str(pid)
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for line in (proc / "maps").read_text().splitlines():
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith(str(DEV_SHM) + "/"):
                found.add(int(fields[4]))
    with contextlib.suppress(OSError):
        for fd in (proc / "fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd).startswith(str(DEV_SHM) + "/"):
                    found.add(os.stat(fd).st_ino)
    return found


def inodes_in_use() -> set[int]:
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            found |= _shm_inodes(entry.name)
    return found


class SharedMemoryWatch:
    def __init__(self, pgid: int) -> None:
        self.pgid = pgid
        self.groups: set[int] = set()  # groups started in the server's, kept once seen: their starter may die first
        self.seen: dict[int, float] = {}  # inode -> when a group member last used it

    def poll(self) -> None:
        now = time.time()
        self.groups |= groups_started_in(self.pgid)
        for members in groups_members({self.pgid, *self.groups}).values():
            for pid in members:
                for inode in _shm_inodes(pid):
                    self.seen[inode] = now

    def remove_leftovers(self) -> list[str]:
        """Remove what the group used and left behind; call once the group is gone. Returns the names removed."""
        if not self.seen or not DEV_SHM.is_dir():
            return []
        busy = inodes_in_use()
        removed = []
        for entry in DEV_SHM.iterdir():
            try:
                st = entry.lstat()
            except OSError:
                continue
            last_seen = self.seen.get(st.st_ino)
            # Created well after the last sighting: the inode number was reused by someone else's new file. (Writes
            # through a mapping move ctime too, hence the slack.)
            if last_seen is None or st.st_ino in busy or st.st_ctime > last_seen + _CTIME_SLACK_S:
                continue
            with contextlib.suppress(OSError):
                entry.unlink()
                removed.append(entry.name)
        return removed

    @contextlib.contextmanager
    def polling(self, interval_s: float = 0.1):
        """Keep polling in the background, e.g. while the group shuts down: a process stopped while it starts can
        create a segment after the last regular poll."""
        done = threading.Event()

        def run() -> None:
            while not done.is_set():
                self.poll()
                done.wait(interval_s)

        thread = threading.Thread(target=run, name="shm-watch", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            done.set()
            thread.join()
