"""CPU seconds per process and per thread, from /proc, and the processes of a Triton server: its stubs and what runs
below them."""

from __future__ import annotations

import collections
import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def _stat_cpu_seconds(fields: list[str]) -> float:
    # The stat fields after the name: utime and stime are the 12th and 13th.
    return (int(fields[11]) + int(fields[12])) / _TICK


def cpu_seconds_by_process() -> dict[int, tuple[str, float]]:
    """pid -> (command name, user+system CPU seconds so far), for every process."""
    from vllm_repo.serve.processes import process_table

    return {pid: (comm, _stat_cpu_seconds(fields)) for pid, comm, fields in process_table()}


def thread_cpu_seconds(pids: list[int]) -> dict[str, float]:
    """'PID/thread name' -> CPU seconds so far, for every thread of ``pids`` (the backend names its engine loop and
    send threads in the OS); threads of one name in one process are summed."""
    seconds: dict[str, float] = collections.Counter()
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.find("(") + 1 : stat.rfind(")")]
            seconds[f"{pid}/{name}"] += _stat_cpu_seconds(stat[stat.rfind(")") + 2 :].split())
    return seconds


def busiest_threads(before: dict[str, float], after: dict[str, float], wall: float, top: int = 6) -> dict[str, float]:
    """The threads that used the most CPU between two thread_cpu_seconds() readings, in CPU seconds per second."""
    used = {k: v - before.get(k, 0.0) for k, v in after.items()}
    return {k: round(v / wall, 3) for k, v in sorted(used.items(), key=lambda kv: -kv[1])[:top] if v > 0.005}


def cpu_used(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], labels: dict[int, str]
) -> dict[str, float]:
    """CPU seconds each process used between two cpu_seconds_by_process() readings, by its label (else its command
    name), the busiest first; processes of one label are summed."""
    used: dict[str, float] = collections.Counter()
    for pid, (name, seconds) in after.items():
        delta = seconds - before.get(pid, (name, 0.0))[1]
        if delta > 0.005:
            used[labels.get(pid, name)] += delta
    return {k: round(v, 3) for k, v in sorted(used.items(), key=lambda kv: -kv[1])}


def cpu_seconds_of(
    before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]], pids: list[int] | set[int]
) -> float:
    """The CPU seconds ``pids`` used together between two cpu_seconds_by_process() readings."""
    return sum(after[p][1] - before.get(p, ("", 0.0))[1] for p in set(pids) if p in after)


def children_of(pid: int) -> list[int]:
    """Every process below ``pid``: its EngineCore, and a backend's own helper processes with theirs."""
    from vllm_repo.serve.processes import process_table

    parents = {child: int(fields[1]) for child, _, fields in process_table()}  # fields: state, ppid, ...
    found: list[int] = []
    frontier = [pid]
    while frontier:
        below = [child for child, parent in parents.items() if parent in frontier]
        found += below
        frontier = below
    return found


def process_group(pgid: int | None) -> list[int]:
    from vllm_repo.serve.processes import process_group_members

    return process_group_members(pgid) if pgid else []


def stub_pids(server_pids: list[int]) -> dict[str, int]:
    """Model name -> pid of the backend stub that serves it (its command line names the model's model.py)."""
    stubs = {}
    for pid in server_pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0].endswith(b"triton_python_backend_stub") or len(argv) < 2:
            continue
        # argv[1]: <repository>/<model>/<version>/model.py
        stubs[Path(argv[1].decode()).parents[1].name] = pid
    return stubs
