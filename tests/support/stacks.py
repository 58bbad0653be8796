"""The native stacks of a server's processes, for a test to show where a hung server stopped."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from vllm_repo.serve.processes import process_group_members


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
