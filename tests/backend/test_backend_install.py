"""`vllm-repo backend install DIR` and its library function."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vllm_repo.backend import BackendInstallError, backend_target, bundled_backend_path, install_backend
from vllm_repo.errors import UsageError


def test_installs_into_a_backends_directory(tmp_path):
    target, changed = install_backend(tmp_path)
    assert (target, changed) == (tmp_path / "vllm" / "model.py", True)
    assert target.read_bytes() == bundled_backend_path().read_bytes()
    assert [p.name for p in target.parent.iterdir()] == ["model.py"]  # no temporary file left behind


def test_the_backends_own_directory_is_recognised(tmp_path):
    assert backend_target(tmp_path / "vllm") == tmp_path / "vllm" / "model.py"
    assert backend_target(tmp_path / "backends") == tmp_path / "backends" / "vllm" / "model.py"
    assert backend_target(tmp_path, name="llm") == tmp_path / "llm" / "model.py"


def test_identical_file_is_left_alone_and_a_different_one_needs_force(tmp_path):
    install_backend(tmp_path)
    assert install_backend(tmp_path) == (tmp_path / "vllm" / "model.py", False)
    target = tmp_path / "vllm" / "model.py"
    target.write_text("# someone else's backend\n")
    with pytest.raises(BackendInstallError, match="differs from the bundled backend") as refused:
        install_backend(tmp_path)
    assert "--force" in refused.value.hint
    assert target.read_text() == "# someone else's backend\n"
    assert install_backend(tmp_path, force=True) == (target, True)
    assert target.read_bytes() == bundled_backend_path().read_bytes()


def test_errors(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is not a directory"):
        install_backend(tmp_path / "file")
    with pytest.raises(UsageError, match="not a plain directory name"):
        install_backend(tmp_path, name="../up")


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "vllm_repo", "backend", *args], capture_output=True, text=True)


def test_cli(tmp_path):
    first = run_cli("install", str(tmp_path))
    assert first.returncode == 0, first.stderr
    assert f"installed {tmp_path / 'vllm' / 'model.py'}" in first.stdout
    (tmp_path / "vllm" / "model.py").write_text("# old\n")
    refused = run_cli("install", str(tmp_path))
    assert refused.returncode == 1
    assert "pass --force" in refused.stderr and "Traceback" not in refused.stderr
    forced = run_cli("install", str(tmp_path), "--force")
    assert forced.returncode == 0, forced.stderr
    assert run_cli("path").stdout.strip() == str(bundled_backend_path())
