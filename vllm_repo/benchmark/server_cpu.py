"""The servers' CPU over a load point: every process of a server's family (its process groups and those started
under them, serve.processes.groups_in_table), named by its role, and the CPU seconds each role used a second.

Beside the client's own CPU (near one second a second, the client is the limit), this says where a server's time
goes: tritonserver (its HTTP and gRPC frontends among its threads), the Python backend's stub, ENGINE_PROCESS's
engine process, the OpenAI gateway, vLLM's EngineCore; `vllm serve`'s API server and EngineCore. A role near 1.0 is a
Python process at the limit of its GIL, whatever the GPU has left.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Collection
from pathlib import Path

from vllm_repo.serve.processes import groups_in_table, process_table

# (what the command line contains, role), first match; otherwise the process's own name (vLLM names its engine core
# "VLLM::EngineCore" and its workers "VLLM::Worker_...": /proc truncates names to 15 characters, so those come from
# the command line too).
PROCESS_ROLES: tuple[tuple[str, str], ...] = (
    ("vllm_repo_backend.engine_process", "engine process"),
    ("-m vllm_repo openai", "OpenAI gateway"),
    ("VLLM::EngineCore", "EngineCore"),
    ("VLLM::Worker", "vLLM worker"),
    ("vllm.entrypoints", "vllm serve API server"),
    ("VLLM::APIServer", "vllm serve API server"),
    ("triton_python_backend_stub", "Python backend stub"),
    ("tritonserver", "tritonserver"),
)
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")
# utime and stime, counted from the field after the process's name in /proc/PID/stat (its 14th and 15th fields).
_UTIME, _STIME = 11, 12


def role_of(command_line: str, name: str) -> str:
    """The role of a process with this command line (arguments joined by spaces) and /proc name."""
    for needle, role in PROCESS_ROLES:
        if needle in command_line:
            return role
    return name


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@dataclasses.dataclass
class _Sample:
    at: float
    ticks: dict[int, int]  # pid -> user and system ticks so far
    roles: dict[int, str]


def _sample(leaders: set[int], known_roles: dict[int, str]) -> _Sample:
    """The ticks and roles of the leaders' families, from one read of /proc."""
    ticks: dict[int, int] = {}
    roles: dict[int, str] = {}
    at = time.monotonic()
    table = list(process_table())
    groups = groups_in_table(leaders, table)
    for pid, name, fields in table:
        if int(fields[2]) not in groups:
            continue
        ticks[pid] = int(fields[_UTIME]) + int(fields[_STIME])
        roles[pid] = known_roles.get(pid) or role_of(_command_line(pid), name)
    return _Sample(at, ticks, roles)


class ServerCpu:
    """CPU seconds a second by role, for the processes of the servers led by ``leaders`` (their process group ids),
    between start() and stop(). A process that ends in between is not counted after its last sample; one that starts
    counts from 0."""

    def __init__(self, leaders: Collection[int]) -> None:
        self.leaders = set(leaders)
        self._start: _Sample | None = None

    def start(self) -> None:
        self._start = _sample(self.leaders, {})

    def stop(self) -> dict[str, float]:
        """Each role's CPU seconds a second since start(), highest first (empty without leaders or a start)."""
        if self._start is None or not self.leaders:
            return {}
        first = self._start
        last = _sample(self.leaders, first.roles)
        wall = last.at - first.at
        if wall <= 0:
            return {}
        used: dict[str, float] = {}
        for pid, ticks in last.ticks.items():
            role = last.roles[pid]
            used[role] = used.get(role, 0.0) + (ticks - first.ticks.get(pid, 0)) / _TICKS_PER_S / wall
        return dict(sorted(((r, round(v, 3)) for r, v in used.items()), key=lambda item: -item[1]))


def total(roles: dict[str, float]) -> float:
    """The CPU seconds a second of every role together."""
    return round(sum(roles.values()), 3)
