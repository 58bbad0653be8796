"""A reader that goes away (`vllm-repo gpus | head`) ends the command quietly, not as an internal error."""

from __future__ import annotations

import os
import subprocess
import sys


def test_closed_stdout_is_not_reported_as_a_bug(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read: the first write fails with EPIPE
    env = {**os.environ, "HOME": str(tmp_path)}  # a crash log would land under this HOME
    try:
        done = subprocess.run(
            [sys.executable, "-m", "vllm_repo", "gpus"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert "internal error" not in done.stderr.lower() and "Traceback" not in done.stderr
    assert not (tmp_path / ".cache" / "vllm-repo" / "crash").exists()
