"""The probes: scripts run by path in the serving Python, whose one MARK line of JSON is their answer."""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
from pathlib import Path

import pytest

from vllm_repo.serve import probes
from vllm_repo.serve.errors import TritonServerError
from vllm_repo.serve.probes import MARK, PYTHON_PROBE, RAY_PROBE, run_probe
from vllm_repo.serve.python_env import probe_python
from vllm_repo.serve.ray_cluster import RayClusterError, probe_serving_python


def fake_python(tmp_path: Path, body: str) -> Path:
    """An executable that stands for the serving Python and does ``body`` (sh), whatever script it is given."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n" + body + "\n")
    python.chmod(0o755)
    return python


@pytest.mark.parametrize("script", [PYTHON_PROBE, RAY_PROBE])
def test_each_probe_is_a_file_of_the_package_that_says_the_package_s_mark(script):
    path = probes.probe_path(script)
    assert path.is_file() and path.parent == Path(probes.__file__).resolve().parent
    assert f'MARK = "{MARK}"' in path.read_text()
    # Run with none of vllm-repo importable: the standard library only.
    assert not re.search(r"^\s*(from|import) vllm_repo", path.read_text(), re.MULTILINE)


def test_the_python_probe_reports_the_interpreter_it_runs_in():
    result = run_probe(sys.executable, PYTHON_PROBE, isolated=True, timeout=60)
    assert result.returncode == 0 and result.failure is None
    assert result.answer is not None
    assert result.answer["version"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert set(result.answer) == {"version", "libdir", "numpy", "vllm"}


def test_the_ray_probe_without_an_address_reports_the_build_only():
    result = run_probe(sys.executable, RAY_PROBE, timeout=60)
    assert result.answer is not None and set(result.answer) == {"build"}
    assert set(result.answer["build"]) == {"dist", "version", "ray_v2_default"}


def test_the_answer_is_the_last_marked_line_whatever_is_printed_around_it(tmp_path):
    python = fake_python(
        tmp_path, f"echo 'a library says hello'\necho '{MARK}{{\"n\": 1}}'\necho '{MARK}{{\"n\": 2}}'\necho bye"
    )
    result = run_probe(python, PYTHON_PROBE, timeout=10)
    assert result.answer == {"n": 2} and result.failure is None


def test_the_script_is_given_by_path_then_its_arguments(tmp_path):
    python = fake_python(tmp_path, f'printf \'{MARK}{{"argv": "%s"}}\\n\' "$*"')
    result = run_probe(python, RAY_PROBE, ["10.0.0.1:6379"], isolated=True, timeout=10)
    assert result.answer == {"argv": f"-I {probes.probe_path(RAY_PROBE)} 10.0.0.1:6379"}


def test_a_probe_without_an_answer_says_its_exit_status_and_last_error_line(tmp_path):
    python = fake_python(tmp_path, "echo starting >&2\necho 'ModuleNotFoundError: no json' >&2\nexit 3")
    result = run_probe(python, PYTHON_PROBE, timeout=10)
    assert result.answer is None and result.returncode == 3
    assert result.failure == "exit status 3: ModuleNotFoundError: no json"
    with pytest.raises(TritonServerError, match="exit status 3: ModuleNotFoundError: no json"):
        probe_python(python)
    with pytest.raises(RayClusterError, match=r"the Ray probe failed in the serving Python .*exit status 3"):
        probe_serving_python(python, None)


def test_an_answer_that_is_not_a_json_object_is_no_answer(tmp_path):
    assert run_probe(fake_python(tmp_path, f"echo '{MARK}{{nope'"), PYTHON_PROBE, timeout=10).failure.startswith(
        "its answer is not JSON"
    )
    said_a_list = run_probe(fake_python(tmp_path, f"echo '{MARK}[1]'"), PYTHON_PROBE, timeout=10)
    assert said_a_list.answer is None and said_a_list.failure == "its answer is not a JSON object"


def test_a_python_that_cannot_run_is_a_failure_not_a_crash(tmp_path):
    not_executable = tmp_path / "python"
    not_executable.write_text("")
    result = run_probe(not_executable, PYTHON_PROBE, timeout=10)
    assert result.answer is None and result.returncode is None and "Permission denied" in result.failure
    with pytest.raises(TritonServerError, match="could not run the serving Python"):
        probe_python(not_executable)


def test_a_probe_that_hangs_is_cut_off_with_what_it_started(tmp_path):
    pid_file = tmp_path / "child.pid"
    python = fake_python(tmp_path, f"sleep 30 &\necho $! > {shlex.quote(str(pid_file))}\nwait")
    began = time.monotonic()
    result = run_probe(python, RAY_PROBE, timeout=1)
    assert time.monotonic() - began < 10
    assert result.timed_out and result.answer is None and result.failure == "no answer within 1 s"
    child = int(pid_file.read_text())
    for _ in range(50):  # the kill is sent; the child may take a moment to be reaped by init
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the probe's child outlived the timeout")


def test_importing_a_probe_runs_nothing(capsys):
    # Tools that import every module of the package (docs, coverage) must not start a Ray driver.
    import vllm_repo.serve.probes.python_probe
    import vllm_repo.serve.probes.ray_probe  # noqa: F401

    assert capsys.readouterr().out == ""
