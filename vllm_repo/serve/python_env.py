"""The serving Python: the interpreter with vLLM (and numpy<2) that Triton's Python stub runs the backend in. It need
not be the Python running vllm-repo, so everything about it is learnt by running it, never by importing it here."""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

from vllm_repo.serve.errors import TritonServerError
from vllm_repo.serve.probes import PYTHON_PROBE, run_probe
from vllm_repo.settings import SERVING_PYTHON_ENV

PROBE_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class PythonInfo:
    """What the Triton stub needs to know about the serving Python (probed by running it)."""

    executable: Path
    version: str  # "3.11"
    libdir: Path  # where libpython3.X.so lives: the stub links it from LD_LIBRARY_PATH
    numpy_version: str | None
    vllm_version: str | None  # from package metadata; vLLM itself is never imported by the probe

    @property
    def bin_dir(self) -> Path:
        # Not resolved: a venv's bin/python is a symlink to the base interpreter, and the venv is what we want.
        return self.executable.parent


def probe_python(executable: str | os.PathLike) -> PythonInfo:
    """Run ``executable`` once (probes/python_probe.py) to learn its version, libpython directory, numpy and vLLM
    versions."""
    exe = Path(executable)
    if not exe.exists():
        raise TritonServerError(
            f"serving Python {exe} does not exist; run `bash .ci/setup-serving.sh` and set {SERVING_PYTHON_ENV}"
        )
    # -I: the interpreter's own packages, not what this shell's PYTHONPATH or the user's site-packages add.
    result = run_probe(exe, PYTHON_PROBE, isolated=True, timeout=PROBE_TIMEOUT_S)
    if result.answer is None or result.returncode != 0:
        raise TritonServerError(f"could not run the serving Python {exe}: {result.failure or result.last_error_line}")
    data = result.answer
    return PythonInfo(
        executable=exe,
        version=data["version"],
        libdir=Path(data["libdir"]),
        numpy_version=data["numpy"],
        vllm_version=data["vllm"],
    )


def serving_python_path(python: str | os.PathLike | None) -> Path:
    """--python, else $VLLM_REPO_SERVING_PYTHON, else this interpreter."""
    if python:
        return Path(python).expanduser()
    if os.environ.get(SERVING_PYTHON_ENV):
        return Path(os.environ[SERVING_PYTHON_ENV])
    return Path(sys.executable)
