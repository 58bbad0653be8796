"""The server's process group and shared memory, read from /proc and /dev/shm: what is still running under a
group id, and which segments a server left behind."""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Collection, Iterator
from pathlib import Path

DEV_SHM = Path("/dev/shm")


def process_table() -> Iterator[tuple[int, str, list[str]]]:
    """(pid, command name, the stat fields after the name) for every process, read from /proc/PID/stat."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may contain spaces: split after the last ')'.
        yield int(entry.name), stat[stat.find("(") + 1 : stat.rfind(")")], stat[stat.rfind(")") + 2 :].split()


def process_group_members(pgid: int) -> list[int]:
    """Processes whose process group is ``pgid`` and that still run, read from /proc.

    ``os.killpg(pgid, 0)`` is not enough: it succeeds while an unreaped zombie is left in the group. Nor is the
    process's own state: once its main thread has ended, /proc/PID/stat says zombie (Z) while its other threads may
    still run, or still be tearing the process down (its memory, its GPU); it counts until the last one has ended.
    """
    return groups_members({pgid}).get(pgid, [])


def groups_members(groups: Collection[int]) -> dict[int, list[int]]:
    """process_group_members for several groups in one read of /proc: each group that still has a running member,
    and its members."""
    found: dict[int, list[int]] = {}
    for pid, _, fields in process_table():
        group = int(fields[2])
        if group in groups and (fields[0] not in ENDED or threads_running(pid)):
            found.setdefault(group, []).append(pid)
    return found


ENDED = ("Z", "X")  # zombie, dead


def groups_started_in(pgids: int | Collection[int]) -> set[int]:
    """``pgids`` and the process groups started under them: those in a session one of them leads (a server is started
    as the leader of a session of its own), and those led by a child of a member, transitively. ENGINE_PROCESS's
    engine process (the backend's, under the stub) leads a group of its own, so that what vLLM starts from it is
    killed with it; its group is no member of the server's, yet it is the server's, and stays in the server's session
    once its starter has died, where its parent no longer tells whose it is."""
    return groups_in_table(pgids, list(process_table()))


def groups_in_table(pgids: int | Collection[int], processes: list[tuple[int, str, list[str]]]) -> set[int]:
    """groups_started_in over a process table already read (process_table's rows), for a caller that reads more of
    each process from the same read."""
    table = [(pid, int(fields[1]), int(fields[2]), int(fields[3])) for pid, _, fields in processes]
    groups = {pgids} if isinstance(pgids, int) else set(pgids)
    groups |= {group for _, _, group, session in table if session in groups}
    while True:
        members = {pid for pid, _, group, _ in table if group in groups}
        led = {group for pid, ppid, group, _ in table if ppid in members and group == pid and group not in groups}
        if not led:
            return groups
        groups |= led


def threads_running(pid: int) -> bool:
    """Whether a thread of ``pid`` has not ended yet (/proc/PID/task/TID/stat, a state other than zombie or dead)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return False  # gone meanwhile
    for task in tasks:
        try:
            stat = (task / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        if stat[stat.rfind(")") + 2 : stat.rfind(")") + 3] not in ENDED:
            return True
    return False


def shm_segments(prefix: str) -> list[Path]:
    if not DEV_SHM.is_dir():
        return []
    return sorted(p for p in DEV_SHM.iterdir() if p.name.startswith(prefix))


def unique_shm_prefix() -> str:
    # Distinct per server on a machine: two Python backends sharing a prefix corrupt each other's regions.
    return f"vllm_repo_{os.getpid()}_{secrets.token_hex(4)}_"


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
