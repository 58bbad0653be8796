"""`vllm-repo backend install DIR` and its library function."""

from __future__ import annotations

import subprocess
import sys

import pytest

from vllm_repo.backend import (
    BackendInstallError,
    backend_target,
    bundled_backend_files,
    bundled_backend_path,
    install_backend,
)
from vllm_repo.errors import UsageError


def installed_files(backend_dir):
    return sorted(str(p.relative_to(backend_dir)) for p in backend_dir.rglob("*") if p.is_file())


def test_installs_model_py_and_its_package_into_a_backends_directory(tmp_path):
    target, changed = install_backend(tmp_path)
    assert (target, changed) == (tmp_path / "vllm" / "model.py", True)
    files = bundled_backend_files()
    assert {"model.py", "vllm_repo_backend/__init__.py", "vllm_repo_backend/contract.py"} <= set(files)
    assert installed_files(target.parent) == sorted(files)  # no temporary file left behind, no cache
    for relative, source in files.items():
        assert (target.parent / relative).read_bytes() == source.read_bytes()
    assert target.read_bytes() == bundled_backend_path().read_bytes()


def test_a_module_the_bundled_package_no_longer_has_is_removed_and_a_missing_one_written(tmp_path):
    target, _ = install_backend(tmp_path)
    package = target.parent / "vllm_repo_backend"
    (package / "gone.py").write_text("# a module of an older release\n")
    (package / "contract.py").unlink()
    assert install_backend(tmp_path) == (target, True)  # only a missing file: no --force needed
    assert not (package / "gone.py").exists()
    assert installed_files(target.parent) == sorted(bundled_backend_files())


def test_the_backends_own_directory_is_recognised(tmp_path):
    assert backend_target(tmp_path / "vllm") == tmp_path / "vllm" / "model.py"
    assert backend_target(tmp_path / "backends") == tmp_path / "backends" / "vllm" / "model.py"
    assert backend_target(tmp_path, name="llm") == tmp_path / "llm" / "model.py"


def test_identical_files_are_left_alone_and_different_ones_need_force(tmp_path):
    install_backend(tmp_path)
    assert install_backend(tmp_path) == (tmp_path / "vllm" / "model.py", False)
    target = tmp_path / "vllm" / "model.py"
    for changed in (target, target.parent / "vllm_repo_backend" / "native.py"):
        original = changed.read_bytes()
        changed.write_text("# someone else's\n")
        with pytest.raises(BackendInstallError, match=f"{changed.name} already exists and differs") as refused:
            install_backend(tmp_path)
        assert "--force" in refused.value.hint
        assert changed.read_text() == "# someone else's\n"
        assert install_backend(tmp_path, force=True) == (target, True)
        assert changed.read_bytes() == original


def test_a_containers_own_backend_beside_it_is_left_as_it_is(tmp_path):
    # An NGC container's backends/vllm/: Triton's own model.py and utils/ package.
    own = tmp_path / "vllm"
    (own / "utils").mkdir(parents=True)
    (own / "utils" / "metrics.py").write_text("# Triton's\n")
    (own / "model.py").write_text("# Triton's\n")
    assert install_backend(tmp_path, force=True) == (own / "model.py", True)
    assert (own / "utils" / "metrics.py").read_text() == "# Triton's\n"
    assert (own / "vllm_repo_backend" / "contract.py").is_file()


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
