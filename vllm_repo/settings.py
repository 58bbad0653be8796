"""Project settings from a `[tool.vllm-repo]` table in pyproject.toml, or the top level of a .vllm-repo.toml
(which wins when both exist), found by walking up from the path being checked:

    [tool.vllm-repo]
    gpu = "H100 80GB"        # or gpu-memory-gib = 79.2
    num-gpus = 2
    vllm-version = "0.26.0"
    usage-context = "engine"
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FILE_NAMES = (".vllm-repo.toml", "pyproject.toml")


class SettingsError(ValueError):
    pass


class ProjectSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    gpu: str | None = None
    gpu_memory_gib: float | None = Field(default=None, alias="gpu-memory-gib", gt=0)
    num_gpus: int | None = Field(default=None, alias="num-gpus", ge=1)
    vllm_version: str | None = Field(default=None, alias="vllm-version")
    usage_context: str | None = Field(default=None, alias="usage-context")
    source: str | None = Field(default=None, exclude=True)
    """The file the settings came from."""

    @property
    def gpu_spec(self) -> str | float | None:
        """What the estimator takes as its GPU: a catalog name or a size in GiB."""
        return self.gpu if self.gpu else self.gpu_memory_gib


def _table(path: Path) -> dict[str, Any] | None:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
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
    try:
        settings = ProjectSettings.model_validate(table)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'table'}: {e['msg']}" for e in exc.errors())
        where = "[tool.vllm-repo] in " if path.name == "pyproject.toml" else ""
        raise SettingsError(f"{where}{path}: {problems}") from None
    if settings.gpu and settings.gpu_memory_gib:
        raise SettingsError(f"{path}: set either gpu or gpu-memory-gib, not both")
    settings.source = str(path)
    return settings
