"""vllm-repo launch started as a user runs it, in a session of its own, and the checks that it left nothing behind when
it stopped: no process of its group, no /dev/shm segment, no IPC socket, no python_env directory, no listening port."""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.support.serving import SERVING_PYTHON, vllm_repo_cli
from vllm_repo.serve.claims import python_env_dirs, unclaimed_python_envs
from vllm_repo.serve.guardian import Guardian
from vllm_repo.serve.ports import free_ports
from vllm_repo.serve.processes import groups_members, process_group_members

READY_TIMEOUT = 300
# What launch says of Triton 2.51's load hang (vllm_repo/serve/load_hang.py hang_message)
HUNG_LOAD = "has not finished loading"


DEV_SHM = Path("/dev/shm")


UUID_NAME = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def shm_names() -> set[str]:
    return {p.name for p in DEV_SHM.iterdir()} if DEV_SHM.is_dir() else set()


def ipc_sockets() -> set[str]:
    """vLLM's ZMQ IPC sockets (files named by a UUID) directly in the temporary directory."""
    tmp = Path(tempfile.gettempdir())
    return {p.name for p in tmp.iterdir() if UUID_NAME.fullmatch(p.name) and p.is_socket()}


def bound_socket_paths() -> set[str]:
    """Paths of the Unix sockets some live process has bound (/proc/net/unix): another vLLM serving on this machine
    keeps its IPC sockets there, a socket a dead server left behind is bound by nobody."""
    paths = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8:
            paths.add(fields[7])
    return paths


def orphaned_ipc_sockets(before: set[str]) -> set[str]:
    """IPC sockets created since ``before`` that no live process has bound: what a stopped server left."""
    tmp = Path(tempfile.gettempdir())
    deadline = time.monotonic() + 10
    while True:  # another server shutting down removes its own in a moment
        bound = bound_socket_paths()
        left = {name for name in ipc_sockets() - before if str(tmp / name) not in bound}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def shm_in_use() -> set[str]:
    """/dev/shm entries some live process has mapped (POSIX shared memory, semaphores) or open. Matched by inode: a
    semaphore is mapped under the temporary name it was created with, then linked to its real name."""
    inodes: set[int] = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            inodes |= shm_inodes_of(proc)
    return shm_names_of(inodes)


def shm_inodes_of(proc: Path) -> set[int]:
    """The inodes of the /dev/shm files the process at /proc/PID maps or holds open."""
    inodes: set[int] = set()
    try:
        for line in (proc / "maps").read_text().splitlines():
            fields = line.split()
            if len(fields) >= 6 and fields[5].startswith("/dev/shm/"):
                inodes.add(int(fields[4]))
        for fd in (proc / "fd").iterdir():
            if os.readlink(fd).startswith("/dev/shm/"):
                inodes.add(os.stat(fd).st_ino)
    except OSError:
        pass
    return inodes


def shm_names_of(inodes: set[int]) -> set[str]:
    names = set()
    for entry in DEV_SHM.iterdir():
        try:
            if entry.stat().st_ino in inodes:
                names.add(entry.name)
        except OSError:
            continue
    return names


class DescendantsWatch:
    """What a launch and the processes it started use, noted every 0.5 s in a thread until launch exits: the /dev/shm
    inodes they map or hold open, and their process groups. Segments that other test workers' servers orphan
    meanwhile are no leftover of this launch; a group started below the server (ENGINE_PROCESS's engine process leads
    its own) is followed even after its starter has died. Kept apart from the watch launch runs (serve/shm_watch.py),
    which the checks that use this one test."""

    def __init__(self, root: int, shm_before: set[str]) -> None:
        """``shm_before``: /dev/shm's names before ``root`` started, read by the caller."""
        self.root, self.shm_before = root, shm_before
        self.inodes: set[int] = set()
        self.groups: set[int] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="descendants-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        # Until launch has exited (it exits once its server is stopped), and once more after. A look takes 5-10 ms of
        # this process's GIL with a server's processes to read, which a benchmark client in the same process shares:
        # vLLM's segments live as long as their engine, seconds at least.
        while self.look() and not self._done.wait(0.5):
            pass

    def look(self) -> bool:
        """Note what the family uses now; returns whether launch still runs."""
        from vllm_repo.serve.processes import ENDED, process_table

        table = {pid: (fields[0], int(fields[1]), int(fields[2]), int(fields[3])) for pid, _, fields in process_table()}
        # By group and by the session a seen group leads (a server's, where a group whose leader died stays), then by
        # parent.
        family = {self.root} | {
            pid for pid, (_, _, group, session) in table.items() if group in self.groups or session in self.groups
        }
        while more := {pid for pid, (_, ppid, _, _) in table.items() if ppid in family and pid not in family}:
            family |= more
        for pid in family & table.keys():
            self.groups.add(table[pid][2])
            self.inodes |= shm_inodes_of(Path("/proc") / str(pid))
        return self.root in table and table[self.root][0] not in ENDED

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def assert_family_gone(watch: DescendantsWatch, shm_prefix: str | None = None) -> None:
    """No process of any group the watch saw below its root still runs (15 s for released guardians, which exit on
    their own a moment later), and no /dev/shm segment new since the root started is left: none that a process of the
    family used and none now uses (other test workers' servers orphan theirs meanwhile), none named ``shm_prefix``.
    A resource tracker unlinks what its process left a moment after: only what stays orphaned counts."""
    watch.stop()
    groups = watch.groups
    deadline = time.monotonic() + 15
    while groups_members(groups) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = groups_members(groups)
    kill_groups(left)  # once noted, so that a failing check leaves nothing running for the tests after it
    assert left == {}, f"processes of the family's groups still ran: {left}"
    deadline = time.monotonic() + 10
    while True:
        new = shm_names() - watch.shm_before
        orphaned = shm_names_of(watch.inodes) & (new - shm_in_use())
        left = {name for name in new if shm_prefix and name.startswith(shm_prefix)} | orphaned
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert left == set(), f"/dev/shm segments left behind: {sorted(left)}"


def kill_groups(groups: Iterable[int]) -> None:
    """SIGKILL to each of ``groups`` that still has a process: a safety net, after a check has noted what was left."""
    for group in groups:
        if process_group_members(group):
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclasses.dataclass
class Launched:
    """A `vllm-repo launch` process (its own session) and what it printed."""

    proc: subprocess.Popen
    url: str
    ports: tuple[int, int, int]
    lines: list[str]
    shm_before: set[str]
    ipc_before: set[str] = dataclasses.field(default_factory=ipc_sockets)
    python_envs_before: set[str] = dataclasses.field(default_factory=python_env_dirs)
    server_pid: int | None = None
    # Stops launch's group (launch then stops its server) should this test process die first.
    guardian: Guardian | None = None
    descendants: DescendantsWatch = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.descendants = DescendantsWatch(self.proc.pid, self.shm_before)

    def release_guardian(self) -> None:
        if self.guardian is not None and self.proc.poll() is not None:
            self.guardian.release()
            self.guardian = None

    @property
    def output(self) -> str:
        return "".join(self.lines)

    @property
    def shm_prefix(self) -> str:
        # processes.unique_shm_prefix(): one per server, starting with the launching process's pid.
        return f"vllm_repo_{self.proc.pid}_"

    def send(self, sig: int) -> None:
        # Ctrl-C in a terminal signals the foreground process group: launch's own group here.
        os.killpg(self.proc.pid, sig)

    def wait_exit(self, timeout: float) -> tuple[int, float]:
        began = time.monotonic()
        code = self.proc.wait(timeout=timeout)
        self.release_guardian()
        return code, time.monotonic() - began

    def kill_everything(self) -> None:
        """Safety net only: the tests assert that nothing is left; this makes sure of it whatever happened."""
        for pgid in (self.proc.pid, self.server_pid):
            if pgid:
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.release_guardian()
        self.descendants.stop()


def _children(pid: int) -> list[tuple[int, str]]:
    from vllm_repo.serve.processes import process_table

    return [(child, comm) for child, comm, fields in process_table() if int(fields[1]) == pid]


def start_launch(repo: Path, *extra: str, wait_ready: bool = True, env: dict | None = None) -> Launched:
    """`vllm-repo launch REPO EXTRA...` on free ports, followed until Triton is ready (with ``wait_ready``). A launch
    that stops on Triton 2.51's load hang (serve/load_hang.py: its server is gone with it) is started once more."""
    launched = _start_launch(repo, *extra, wait_ready=wait_ready, env=env)
    if wait_ready and launched.proc.poll() is not None and HUNG_LOAD in launched.output:
        warnings.warn(f"launch stopped on Triton's load hang; starting it again:\n{launched.output}", stacklevel=2)
        launched.release_guardian()
        launched = _start_launch(repo, *extra, wait_ready=wait_ready, env=env)
    if wait_ready and launched.proc.poll() is not None:
        pytest.fail(f"launch exited with {launched.proc.returncode}:\n{launched.output}")
    return launched


def _start_launch(repo: Path, *extra: str, wait_ready: bool, env: dict | None) -> Launched:
    # Distinct, and none a port the caller picked for the command (--openai-port).
    given = [int(value) for flag, value in itertools.pairwise(extra) if flag.endswith("-port")]
    ports = tuple(free_ports(3, avoid=given))
    cmd = vllm_repo_cli(
        "launch",
        str(repo),
        "--http-port",
        str(ports[0]),
        "--grpc-port",
        str(ports[1]),
        "--metrics-port",
        str(ports[2]),
        "--python",
        SERVING_PYTHON,
        *extra,
    )
    launched = Launched(
        proc=subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        ),
        url=f"http://127.0.0.1:{ports[0]}",
        ports=ports,
        lines=[],
        shm_before=shm_names(),
    )
    launched.guardian = Guardian(launched.proc.pid, None, grace_s=30)  # launch removes its server's regions
    reader = threading.Thread(
        target=lambda: launched.lines.extend(iter(launched.proc.stdout.readline, "")), daemon=True
    )
    reader.start()
    if not wait_ready:
        # Note the server's pid while it lives, to check its process group once it is gone.
        def watch():
            while launched.proc.poll() is None and launched.server_pid is None:
                servers = [pid for pid, comm in _children(launched.proc.pid) if comm == "tritonserver"]
                launched.server_pid = servers[0] if servers else None
                time.sleep(0.1)

        threading.Thread(target=watch, daemon=True).start()
        return launched
    deadline = time.monotonic() + READY_TIMEOUT
    while "Triton is ready" not in launched.output:
        if launched.proc.poll() is not None:
            reader.join(5)
            return launched  # start_launch says why
        if time.monotonic() > deadline:
            launched.kill_everything()
            pytest.fail(f"not ready after {READY_TIMEOUT} s:\n{launched.output}")
        time.sleep(0.25)
    servers = [pid for pid, comm in _children(launched.proc.pid) if comm == "tritonserver"]
    assert len(servers) == 1, _children(launched.proc.pid)
    launched.server_pid = servers[0]
    return launched


def assert_nothing_left(launched: Launched) -> None:
    assert launched.server_pid is not None
    assert_family_gone(launched.descendants, launched.shm_prefix)
    # The server was its own process group's leader: the stub, vLLM's EngineCore and everything else they started
    # belonged to that group or to one started below it (ENGINE_PROCESS's engine process leads its own).
    assert launched.server_pid in launched.descendants.groups
    # vLLM's sockets go in the server's work directory, not the temporary directory, where a killed engine left them.
    # Only the orphaned ones count: other vLLMs on this machine (a CI runner's, the tests' reference) keep theirs.
    assert orphaned_ipc_sockets(launched.ipc_before) == set()
    # Triton's Python backend makes a /tmp/python_env_* directory per server and leaves it: the server's own go. One
    # that a live server holds is another server's (claims.py), started on this machine meanwhile.
    assert unclaimed_python_envs(launched.python_envs_before) == set()
    for port in launched.ports:  # nothing listens there any more
        with socket.socket() as s, pytest.raises(ConnectionRefusedError):
            s.connect(("127.0.0.1", port))


def stop_and_check(launched: Launched, *more_ports: int) -> None:
    """SIGTERM, as a service manager stops launch: it exits 0 and leaves nothing, ``more_ports`` closed too."""
    launched.send(signal.SIGTERM)
    try:
        code, _ = launched.wait_exit(60)
        assert code == 0, launched.output
        launched.ports = (*launched.ports, *more_ports)
        assert_nothing_left(launched)
    finally:
        launched.kill_everything()


def engine_core_pid(server_pgid: int) -> int:
    """vLLM's EngineCore process in the Triton server's process group (found by its process title, in that group)."""
    return next(
        pid
        for pid in process_group_members(server_pgid)
        if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"VLLM::EngineCore")
    )
