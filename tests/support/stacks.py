"""The native stacks of a server's processes, for a test to show where a hung server stopped."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

from tests.support.launch import hung_servers_shm
from vllm_repo.serve.errors import TritonLoadHung
from vllm_repo.serve.processes import process_group_members
from vllm_repo.serve.server import TritonServer
from vllm_repo.serve.shm_watch import SharedMemoryWatch


def server_stacks(pgid: int, *, frames: int = 25, timeout_s: float = 60.0) -> str:
    """gdb's backtrace of every thread of the tritonserver and Python-backend stub processes in group ``pgid``
    (the threads of a stub whose model never loaded say what it waits on); a line saying why not where gdb is
    missing."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "(no gdb on this machine: no stacks)"
    parts = []
    for pid in process_group_members(pgid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if not command.endswith(("tritonserver", "triton_python_backend_stub")):
            continue
        try:
            traced = subprocess.run(
                [gdb, "-p", str(pid), "-batch", "-ex", f"thread apply all bt {frames}"],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            ).stdout
        except subprocess.TimeoutExpired:
            traced = "(gdb timed out)"
        threads = traced[traced.find("\nThread ") + 1 :] if "\nThread " in traced else traced
        parts.append(f"== {pid} {command}\n{threads}")
    return "\n".join(parts) or "(no server or stub process left in the group)"


def note_hung_load(server: TritonServer, error: TritonLoadHung, tmp_path: Path, what: str) -> SharedMemoryWatch:
    """A server whose load hung: Triton 2.51's Python backend waiting for an initialized stub to exit
    (tests/backend/conftest.py's metrics-off fixture says how it was found). Its stacks are written to tmp_path and
    shown in a warning, and the watch of its shared memory is returned: once the caller has stopped the server,
    ``remove_leftovers()`` removes what its killed processes left (vLLM's sem.mp-* segments), which another test's
    leftover check would count."""
    assert server.pgid is not None  # started: wait_ready saw it hang
    stacks, stacks_file = server_stacks(server.pgid), tmp_path / "hung-server-stacks.txt"
    stacks_file.write_text(stacks)
    warnings.warn(
        f"{what} hung at load; starting it again: {error}\nits threads ({stacks_file}):\n{stacks[-20000:]}",
        stacklevel=2,
    )
    hung = SharedMemoryWatch(server.pgid)
    hung.poll()
    list_segments(hung)
    return hung


def list_segments(hung: SharedMemoryWatch) -> None:
    """Say which /dev/shm inodes the hung server's group used (tests/support/launch.py hung_servers_shm): they are
    orphaned from the moment its processes die until remove_leftovers(), and are this test's, not another's."""
    listing = hung_servers_shm() / f"{hung.pgid}.txt"
    listing.parent.mkdir(exist_ok=True)
    partial = listing.with_suffix(".part")
    partial.write_text(" ".join(map(str, hung.seen)))
    partial.replace(listing)  # whole or not at all for a reader


@contextlib.contextmanager
def listed_while_stopping(hung: SharedMemoryWatch, interval_s: float = 0.1) -> Iterator[None]:
    """While the hung server stops, keep watching its group and its listing up to date: vLLM's processes, stopped,
    can make semaphores (sem.mp-*) after the last look and then be killed, leaving them orphaned."""
    try:
        with hung.polling(interval_s, after_poll=lambda: list_segments(hung)):
            yield
    finally:
        hung.poll()
        list_segments(hung)


@contextlib.contextmanager
def ready_server(
    make: Callable[[int], TritonServer], tmp_path: Path, what: str, timeout: float = 600
) -> Iterator[TritonServer]:
    """The server ``make(attempt)`` builds, started and ready, stopped at the end. Should its load hang as Triton 2.51's
    Python backend can on busy CPUs (TritonLoadHung: the backend said ready, Triton never followed; load_hang.py),
    its stacks are noted, it is stopped, and a second one is started; a second hang fails the test."""
    for attempt in (1, 2):
        server = make(attempt)
        hung: SharedMemoryWatch | None = None
        with server:
            try:
                server.wait_ready(timeout=timeout)
            except TritonLoadHung as exc:
                if attempt == 2:
                    raise
                hung = note_hung_load(server, exc, tmp_path, what)
                with listed_while_stopping(hung):
                    server.stop()
            else:
                yield server
                return
        if hung is not None:
            hung.remove_leftovers()  # not to be counted as another test's leftovers
            (hung_servers_shm() / f"{hung.pgid}.txt").unlink(missing_ok=True)
