"""The native stacks of a server's processes, for a test to show where a hung server stopped."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

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
    ``remove_leftovers()`` removes what its killed processes left (vLLM's sem.mp-* segments), which nothing else
    would remove."""
    assert server.pgid is not None  # started: wait_ready saw it hang
    stacks, stacks_file = server_stacks(server.pgid), tmp_path / "hung-server-stacks.txt"
    stacks_file.write_text(stacks)
    warnings.warn(
        f"{what} hung at load; starting it again: {error}\nits threads ({stacks_file}):\n{stacks[-20000:]}",
        stacklevel=2,
    )
    hung = SharedMemoryWatch(server.pgid)
    hung.poll()
    return hung


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
                # vLLM's processes, stopped, can make semaphores (sem.mp-*) after a last look and then be killed
                with hung.polling():
                    server.stop()
                hung.poll()
            else:
                yield server
                return
        if hung is not None:
            hung.remove_leftovers()  # its killed processes' orphans
