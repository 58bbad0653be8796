"""The README's Quickstart as a new user runs it: scripts/quickstart.sh in a fresh copy of the project."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

import pytest

from tests.support.serving import NEEDS_SERVING, ROOT

pytestmark = [NEEDS_SERVING, pytest.mark.e2e, pytest.mark.slow]


def _free() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fresh_copy(dest):
    """The project's files as a clone would have them (tracked and new, not ignored: no .venv, no caches)."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, listed):
        source = ROOT / rel
        if source.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    return dest


def test_quickstart_runs_end_to_end_from_a_fresh_copy(tmp_path):
    project = fresh_copy(tmp_path / "vllm-repo")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_REPO_", "VIRTUAL_ENV"))}
    # The caches (serving venv, Triton files) are shared with the test run; everything else is the new user's.
    if "VLLM_REPO_CACHE" in os.environ:
        env["VLLM_REPO_CACHE"] = os.environ["VLLM_REPO_CACHE"]
    env.update(
        QUICKSTART_HTTP_PORT=str(_free()), QUICKSTART_GRPC_PORT=str(_free()), QUICKSTART_METRICS_PORT=str(_free())
    )

    def quickstart() -> tuple[subprocess.CompletedProcess, str]:
        done = subprocess.run(
            ["bash", "scripts/quickstart.sh"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
            start_new_session=True,
        )
        return done, done.stdout + done.stderr

    done, log = quickstart()
    assert done.returncode == 0, log[-6000:]
    for step in ("vllm-repo init", "vllm-repo validate", "vllm-repo launch", "vllm-repo infer", "stop"):
        assert step in log
    assert "created model 'tiny'" in log
    assert "0 error(s)" in log and "fits: yes" in log
    assert "Triton is ready" in log
    assert "finish_reason=length input_tokens=" in log and "output_tokens=48" in log
    assert "stopped (" in log
    assert (project / "quickstart" / "model_repository" / "tiny" / "1" / "model.json").is_file()

    # The closing lines work as printed in a new shell: vllm-repo on PATH, and the serving Python launch needs.
    export = next(line.strip() for line in log.splitlines() if line.strip().startswith("export PATH="))
    check = f'{export}; vllm-repo --version && "$VLLM_REPO_SERVING_PYTHON" -c "import vllm"'
    shell = subprocess.run(["bash", "-c", check], capture_output=True, text=True, env=env, timeout=300)
    assert shell.returncode == 0 and shell.stdout.startswith("vllm-repo "), shell.stderr[-2000:]

    # A second run, as the README promises, reuses what the first one built.
    again, log = quickstart()
    assert again.returncode == 0, log[-6000:]
    assert "reusing" in log and "replaced model 'tiny'" in log and "output_tokens=48" in log
