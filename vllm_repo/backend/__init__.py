"""The bundled Triton backend: ``model.py`` drives vLLM's AsyncLLM behind Triton's Python backend, with its package
``vllm_repo_backend/`` beside it (the contract, request parsing, the OpenAI wire, metrics, ...).

Both are copied into a Triton backend directory together (e.g. ``/opt/tritonserver/backends/vllm/``). Of them,
vllm-repo itself imports only the package's contract.py (tensors, parameters, files, OpenAI routes), which needs no
Triton and no vLLM. This module locates the backend and installs it.
"""

from __future__ import annotations

import os
from pathlib import Path

from vllm_repo.errors import UsageError, VllmRepoError
from vllm_repo.files import write_atomic

BACKEND_FILE = "model.py"
# The package model.py imports from beside it; model.py's docstring says why it has this name.
BACKEND_PACKAGE = "vllm_repo_backend"


class BackendInstallError(VllmRepoError):
    """The backend could not be written; the message says where and what to do."""


def bundled_backend_path() -> Path:
    """The bundled backend's ``model.py`` inside the installed package."""
    return Path(__file__).with_name(BACKEND_FILE)


def bundled_backend_files() -> dict[str, Path]:
    """The files of the bundled backend, {path relative to the backend's directory: source}: model.py and its
    package's modules (no caches)."""
    package = Path(__file__).with_name(BACKEND_PACKAGE)
    files = {BACKEND_FILE: bundled_backend_path()}
    for module in sorted(package.glob("*.py")):
        files[f"{BACKEND_PACKAGE}/{module.name}"] = module
    return files


def backend_target(directory: str | os.PathLike, name: str = "vllm") -> Path:
    """Where ``install_backend`` writes: ``DIRECTORY/<name>/model.py`` for a Triton backends directory (the one holding
    ``python/``), or ``DIRECTORY/model.py`` when DIRECTORY already is the backend's own directory (named ``<name>``)."""
    directory = Path(directory)
    if directory.name == name and not (directory / name).exists():
        return directory / BACKEND_FILE
    return directory / name / BACKEND_FILE


def copy_backend(backend_dir: Path) -> None:
    """Write the bundled backend's files into ``backend_dir`` (the directory of its model.py), each atomically, the
    package before model.py: a server that starts meanwhile finds each file old or new, never half written, and the
    new model.py only beside its package. Modules of the package that the bundled one no longer has are removed."""
    files = bundled_backend_files()
    for relative, source in files.items():
        if relative != BACKEND_FILE:
            write_atomic(backend_dir / relative, source.read_bytes(), mode=0o644)
    for stale in sorted((backend_dir / BACKEND_PACKAGE).glob("*.py")):
        if f"{BACKEND_PACKAGE}/{stale.name}" not in files:
            stale.unlink()
    write_atomic(backend_dir / BACKEND_FILE, files[BACKEND_FILE].read_bytes(), mode=0o644)


def install_backend(directory: str | os.PathLike, *, name: str = "vllm", force: bool = False) -> tuple[Path, bool]:
    """Write the bundled backend (model.py and its package) into a Triton backend directory.

    Returns (path of model.py, changed). A backend already there with the same files is left alone (changed=False);
    one whose files differ is replaced only with ``force``. Each file is written atomically (copy_backend).
    """
    if not name or "/" in name or name in (".", ".."):
        raise UsageError(f"backend name {name!r} is not a plain directory name", hint="e.g. --name vllm")
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} is not a directory", hint="give a Triton backend directory")
    target = backend_target(directory, name)
    backend_dir = target.parent
    files = bundled_backend_files()
    differing = [
        relative
        for relative, source in files.items()
        if not (backend_dir / relative).is_file() or (backend_dir / relative).read_bytes() != source.read_bytes()
    ]
    if not differing:
        return target, False
    present = [relative for relative in differing if (backend_dir / relative).exists()]
    if present and not force:
        raise BackendInstallError(
            f"{backend_dir / present[0]} already exists and differs from the bundled backend",
            hint="pass --force to replace it",
        )
    try:
        copy_backend(backend_dir)
    except OSError as exc:
        raise BackendInstallError(f"could not write to {backend_dir}: {exc.strerror or exc}") from exc
    return target, True
