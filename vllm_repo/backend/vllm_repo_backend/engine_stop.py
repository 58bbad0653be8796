"""Stopping vLLM's engine at finalize within a bound: its own shutdown first, then what is left of its processes killed
and the shared memory they had mapped removed.

vLLM's shutdown waits for its processes to tear down in order. On the CPU its worker's process groups take about two
seconds to destroy and the engine core as long again to exit, so a Ctrl-C of launch outlived Triton's five-second exit
timeout; a model reloaded by tune waited as long. Everything the engine had is going away at finalize, so after a
grace period the rest is killed. A killed process does not remove its shared-memory segments (vLLM's message queues
live in /dev/shm), so the segments the engine's processes had mapped are removed here: they are the engine's own.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterable

SHM_DIRECTORY = "/dev/shm"


def _stat_fields() -> dict[int, list[bytes]]:
    """pid -> its /proc/PID/stat fields after the command name (state, ppid, pgrp, ...)."""
    found: dict[int, list[bytes]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so read after its last ")".
                found[int(entry)] = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
    return found


def group_members(pgid: int) -> list[int]:
    """The processes of process group ``pgid``."""
    return [pid for pid, fields in _stat_fields().items() if int(fields[2]) == pgid]


def kill_group(pgid: int) -> list[str]:
    """SIGKILL process group ``pgid`` (ENGINE_PROCESS's engine process and what vLLM started from it) and remove the
    /dev/shm files its processes had mapped that this process has not; returns those removed."""
    segments = shared_memory_of(group_members(pgid)) - shared_memory_of([os.getpid()])
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    return _remove(segments)


def _remove(segments: Iterable[str]) -> list[str]:
    removed = []
    for name in sorted(segments):
        try:
            os.unlink(name)
            removed.append(name)
        except OSError:
            pass  # removed by its owner meanwhile
    return removed


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children before their children (read from /proc; empty where there is none)."""
    parents: dict[int, list[int]] = {}
    for child, fields in _stat_fields().items():
        parents.setdefault(int(fields[1]), []).append(child)
    found: list[int] = []
    queue = [pid]
    while queue:
        children = parents.get(queue.pop(0), [])
        found.extend(children)
        queue.extend(children)
    return found


def shared_memory_of(pids: Iterable[int]) -> set[str]:
    """The /dev/shm files these processes have mapped, by their names now. Matched by inode: a POSIX semaphore
    (multiprocessing's sem.mp-*, which vLLM's EngineCore makes) is mapped under the temporary name glibc created it
    with, then linked to its real name; the mapping shows the temporary one, deleted."""
    inodes: set[int] = set()
    prefix = SHM_DIRECTORY + "/"
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    fields = line.rstrip("\n").split(maxsplit=5)  # address perms offset device inode [path]
                    if len(fields) == 6 and fields[5].startswith(prefix):
                        inodes.add(int(fields[4]))
        except OSError:
            continue
    names: set[str] = set()
    try:
        entries = os.listdir(SHM_DIRECTORY)
    except OSError:
        return names
    for entry in entries:
        path = os.path.join(SHM_DIRECTORY, entry)
        try:
            if os.lstat(path).st_ino in inodes:
                names.add(path)
        except OSError:
            continue  # removed meanwhile
    return names


def stop_within(shutdown: Callable[[], None], grace_s: float, root: int | None = None) -> tuple[list[int], list[str]]:
    """Run ``shutdown`` (vLLM's engine shutdown); if it has not returned after ``grace_s``, SIGKILL every process
    below ``root`` (this process) and remove the /dev/shm files they had mapped. Returns what was killed and
    removed (both empty when the shutdown finished in time). An exception from ``shutdown`` is raised here."""
    root = os.getpid() if root is None else root
    failure: list[BaseException] = []

    def run() -> None:
        try:
            shutdown()
        except BaseException as exc:  # raised again in the caller's thread
            failure.append(exc)

    worker = threading.Thread(target=run, name="vllm-engine-stop", daemon=True)
    worker.start()
    worker.join(grace_s)
    killed: list[int] = []
    removed: list[str] = []
    if worker.is_alive():
        processes = descendants(root)
        segments = shared_memory_of([root, *processes]) - shared_memory_of([root])
        for pid in processes:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except OSError:
                pass  # exited meanwhile
        removed = _remove(segments)
        worker.join(5)  # vLLM's shutdown sees its processes gone and returns
    if failure:
        raise failure[0]
    return killed, removed
