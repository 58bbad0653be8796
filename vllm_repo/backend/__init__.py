"""The bundled Triton backend: ``model.py`` drives vLLM's AsyncLLM behind Triton's Python backend.

``model.py`` is self-contained (it is copied alone into a Triton backend directory, e.g.
``/opt/tritonserver/backends/vllm/``), so nothing here is imported by it. This package only locates and installs it.
"""

from __future__ import annotations

import os
from pathlib import Path

from vllm_repo.errors import UsageError, VllmRepoError
from vllm_repo.files import write_atomic

BACKEND_FILE = "model.py"


class BackendInstallError(VllmRepoError):
    """The backend could not be written; the message says where and what to do."""


def bundled_backend_path() -> Path:
    """The bundled backend's ``model.py`` inside the installed package."""
    return Path(__file__).with_name(BACKEND_FILE)


def backend_target(directory: str | os.PathLike, name: str = "vllm") -> Path:
    """Where ``install_backend`` writes: ``DIRECTORY/<name>/model.py`` for a Triton backends directory (the one holding
    ``python/``), or ``DIRECTORY/model.py`` when DIRECTORY already is the backend's own directory (named ``<name>``)."""
    directory = Path(directory)
    if directory.name == name and not (directory / name).exists():
        return directory / BACKEND_FILE
    return directory / name / BACKEND_FILE


def install_backend(directory: str | os.PathLike, *, name: str = "vllm", force: bool = False) -> tuple[Path, bool]:
    """Write the bundled backend into a Triton backend directory.

    Returns (path written, changed). An identical file already there is left alone (changed=False); a different one
    is replaced only with ``force``. The write is atomic: a temporary file in the same directory, then a rename, so
    a server starting meanwhile sees the old file or the new one, never half of one.
    """
    if not name or "/" in name or name in (".", ".."):
        raise UsageError(f"backend name {name!r} is not a plain directory name", hint="e.g. --name vllm")
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} is not a directory", hint="give a Triton backend directory")
    target = backend_target(directory, name)
    source = bundled_backend_path().read_bytes()
    if target.exists():
        if target.read_bytes() == source:
            return target, False
        if not force:
            raise BackendInstallError(
                f"{target} already exists and differs from the bundled backend", hint="pass --force to replace it"
            )
    try:
        write_atomic(target, source, mode=0o644)  # a server starting meanwhile sees the old file or the new one
    except OSError as exc:
        raise BackendInstallError(f"could not write {target}: {exc.strerror or exc}") from exc
    return target, True
