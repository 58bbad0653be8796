"""Project settings from a `[tool.vllm-repo]` table in pyproject.toml, or the top level of a .vllm-repo.toml
(which wins when both exist), found by walking up from the path being checked:

    [tool.vllm-repo]
    gpu = "H100 80GB"        # or gpu-memory-gib = 79.2
    num-gpus = 2
    vllm-version = "0.26.0"
    usage-context = "engine"
    pack = ["chat", "embed"]  # or true: the models plan places on shared GPUs (plan --pack)
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vllm_repo.errors import UsageError

FILE_NAMES = (".vllm-repo.toml", "pyproject.toml")
# The interpreter launch runs the backend in (vLLM, numpy<2), when it is not the one running vllm-repo: its vLLM is
# also the release the other commands check against (schema.loader.target_vllm_version).
SERVING_PYTHON_ENV = "VLLM_REPO_SERVING_PYTHON"


class SettingsError(UsageError):
    """The settings file can't be read, or a setting is of the wrong kind."""


@dataclasses.dataclass
class ProjectSettings:
    gpu: str | None = None
    gpu_memory_gib: float | None = None
    num_gpus: int | None = None
    vllm_version: str | None = None
    usage_context: str | None = None
    pack: bool | list[str] | None = None
    """The models `plan` packs onto shared GPUs: every one (True) or those named."""
    source: str | None = None
    """The file the settings came from."""

    @property
    def gpu_spec(self) -> str | float | None:
        """What the estimator takes as its GPU: a catalog name or a size in GiB."""
        return self.gpu if self.gpu else self.gpu_memory_gib


# TOML key -> (attribute, what it must be, the check). Checked by hand: validate reads these on every run, and a
# dataclass with five checks starts in a fraction of the time pydantic takes to import.
_KEYS: dict[str, tuple[str, str, Callable[[object], bool]]] = {
    "gpu": ("gpu", "a string", lambda v: isinstance(v, str)),
    "gpu-memory-gib": (
        "gpu_memory_gib",
        "a number greater than 0",
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
    ),
    "num-gpus": (
        "num_gpus",
        "an integer of at least 1",
        lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
    ),
    "vllm-version": ("vllm_version", "a string", lambda v: isinstance(v, str)),
    "usage-context": ("usage_context", "a string", lambda v: isinstance(v, str)),
    "pack": (
        "pack",
        "true, false or a list of model names",
        lambda v: isinstance(v, bool) or (isinstance(v, list) and all(isinstance(x, str) for x in v)),
    ),
}


def _table(path: Path) -> dict[str, Any] | None:
    # Imported here: most runs find no settings file and never parse TOML.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    try:
        data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SettingsError(f"{path}: can't read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: invalid TOML ({exc})") from None
    if path.name == "pyproject.toml":
        table = data.get("tool", {}).get("vllm-repo")
        return table if isinstance(table, dict) else None
    return data


def find_settings_file(start: Path) -> Path | None:
    try:
        here = start.resolve()
    except (OSError, RuntimeError):  # a symlink loop: discovery reports the path itself
        here = start.absolute()
    if here.is_file():
        here = here.parent
    for directory in (here, *here.parents):
        for name in FILE_NAMES:
            path = directory / name
            if path.is_file() and (name != "pyproject.toml" or _table(path) is not None):
                return path
    return None


def load_settings(start: Path | None = None) -> ProjectSettings:
    """Settings for the project containing `start` (the working directory by default); empty when none."""
    path = find_settings_file(start or Path.cwd())
    if path is None:
        return ProjectSettings()
    table = _table(path) or {}
    where = f"[tool.vllm-repo] in {path}" if path.name == "pyproject.toml" else str(path)
    values: dict[str, Any] = {}
    problems = []
    for key, value in table.items():
        # snake_case is accepted too, as the settings' own names.
        spec = _KEYS.get(key) or _KEYS.get(key.replace("_", "-"))
        if spec is None:
            problems.append(f"{key}: unknown setting (known: {', '.join(_KEYS)})")
        elif not spec[2](value):
            problems.append(f"{key}: must be {spec[1]}, not {value!r}")
        else:
            values[spec[0]] = float(value) if spec[0] == "gpu_memory_gib" else value
    if problems:
        raise SettingsError(f"{where}: {'; '.join(problems)}")
    settings = ProjectSettings(**values)
    if settings.gpu and settings.gpu_memory_gib:
        raise SettingsError(f"{path}: set either gpu or gpu-memory-gib, not both")
    settings.source = str(path)
    return settings


def resolve_settings(
    start: Path | None = None,
    *,
    gpu: str | float | None = None,
    gpu_memory_gib: float | None = None,
    num_gpus: int | None = None,
    vllm_version: str | None = None,
    usage_context: str | None = None,
) -> ProjectSettings:
    """The project's settings with the command line's in their place: every flag given wins over the file's value
    (estimate, plan and validate resolve their GPU, GPU count, release and usage context here). ``gpu`` may be a
    catalog name or a size in GiB, as ``gpu_spec`` gives it back."""
    if gpu is not None and gpu_memory_gib is not None:
        raise UsageError("give --gpu or --gpu-memory-gib, not both")
    project = load_settings(start)
    name: str | None
    if gpu is None or isinstance(gpu, str):
        name = gpu
    else:  # a size in GiB
        name, gpu_memory_gib = None, float(gpu)
    settings = dataclasses.replace(
        project,
        num_gpus=project.num_gpus if num_gpus is None else num_gpus,
        vllm_version=project.vllm_version if vllm_version is None else vllm_version,
        usage_context=project.usage_context if usage_context is None else usage_context,
    )
    if name is not None or gpu_memory_gib is not None:  # one GPU flag replaces both of the file's GPU settings
        settings = dataclasses.replace(settings, gpu=name, gpu_memory_gib=gpu_memory_gib)
    return settings
