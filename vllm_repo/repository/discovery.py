"""ModelRepository: which models a set of paths names, and the files each model directory holds.

Triton's layout: <repository>/<model>/config.pbtxt and <repository>/<model>/<version>/..., versions numeric.
The vLLM backend reads <model>/<version>/model.json (engine arguments), for LoRA <model>/<version>/multi_lora.json,
and for its OpenAI API <model>/<version>/openai.json (vllm serve's options). Paths given on the command line may be
a repository root, a model directory or single files (pre-commit passes changed files); each is mapped to its model
directory and repository.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from vllm_repo.backend.vllm_repo_backend.contract import ENGINE_ARGS_FILE, LORA_FILE, OPENAI_FILE
from vllm_repo.errors import UsageError
from vllm_repo.repository.documents import JsonDocument, PbtxtDocument
from vllm_repo.repository.engine_settings import EngineSettings, read_engine_settings

CONFIG_FILE = "config.pbtxt"
# The version directory's files the backend reads (its contract): model.json, multi_lora.json, and openai.json, vllm
# serve's options for the model's OpenAI API (vllm-repo openai, launch --openai-port).
MODEL_FILES = (CONFIG_FILE, ENGINE_ARGS_FILE, LORA_FILE, OPENAI_FILE)
VLLM_BACKEND = "vllm"
# The model files by which Triton picks a backend when config.pbtxt names neither backend nor platform (ONNX Runtime,
# TensorRT, PyTorch, TensorFlow, OpenVINO): a model directory with one of them in a version directory is not vLLM's.
OTHER_BACKENDS_MODEL_FILES = ("model.onnx", "model.plan", "model.pt", "model.savedmodel", "model.graphdef", "model.xml")


class PathError(UsageError):
    """A path that names nothing validate can check."""


@dataclass
class VersionDirectory:
    path: Path

    @property
    def version(self) -> int:
        return int(self.path.name)

    def _json_file(self, name: str) -> JsonDocument | None:
        path = self.path / name
        return JsonDocument.load(path) if path.is_file() else None

    @cached_property
    def engine_args(self) -> JsonDocument | None:
        return self._json_file(ENGINE_ARGS_FILE)

    @cached_property
    def multi_lora(self) -> JsonDocument | None:
        return self._json_file(LORA_FILE)

    @cached_property
    def openai_options(self) -> JsonDocument | None:
        return self._json_file(OPENAI_FILE)


@dataclass
class ModelDirectory:
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG_FILE

    @cached_property
    def config(self) -> PbtxtDocument | None:
        return PbtxtDocument.load(self.config_path) if self.config_path.is_file() else None

    @cached_property
    def entries(self) -> list[Path]:
        try:
            return sorted(self.path.iterdir())
        except OSError:
            return []

    @cached_property
    def versions(self) -> list[VersionDirectory]:
        found = [VersionDirectory(p) for p in self.entries if p.is_dir() and is_version_name(p.name)]
        return sorted(found, key=lambda v: v.version)

    @property
    def backend(self) -> str | None:
        """The backend config.pbtxt names, None when it can't be read or names none."""
        doc = self.config
        if doc is None or doc.config is None:
            return None
        return doc.config.backend or None

    @property
    def uses_vllm_backend(self) -> bool:
        """Whether the vLLM checks apply: config.pbtxt names a vllm backend (``vllm``, or a renamed copy such as
        ``vllm_custom``), or can't be read at all, in which case the engine-args layout the files suggest is taken
        as meant for vLLM. A config that names another backend, or a platform (an ensemble, onnxruntime_onnx...), or
        neither beside another backend's model file, is another backend's model: no vLLM rule is about it."""
        doc = self.config
        if doc is None or doc.config is None:
            return True
        if doc.config.backend:
            return doc.config.backend.startswith(VLLM_BACKEND)
        if doc.config.platform:
            return False
        return not any((v.path / name).exists() for v in self.versions for name in OTHER_BACKENDS_MODEL_FILES)

    @property
    def is_ensemble(self) -> bool:
        doc = self.config
        return doc is not None and doc.config is not None and doc.config.platform == "ensemble"

    @cached_property
    def misplaced_holders(self) -> list[VersionDirectory]:
        """Places outside a numeric version directory where engine args were put anyway: beside config.pbtxt,
        or in a non-numeric directory (model_v1). Layout rules report the place; the content is still checked."""
        holders = [VersionDirectory(self.path)] if (self.path / ENGINE_ARGS_FILE).is_file() else []
        holders += [
            VersionDirectory(p)
            for p in self.entries
            if p.is_dir() and not is_version_name(p.name) and (p / ENGINE_ARGS_FILE).is_file()
        ]
        return holders

    def engine_args_documents(self) -> list[tuple[VersionDirectory, JsonDocument]]:
        """Every model.json of the model: numeric versions in order, then misplaced ones."""
        holders = self.versions + self.misplaced_holders
        return [(v, v.engine_args) for v in holders if v.engine_args is not None]

    def served_engine_args(self) -> JsonDocument | None:
        """The model.json of the version Triton serves by default (its version policy serves the latest), None
        when no numeric version directory has one."""
        in_versions = [v.engine_args for v in self.versions if v.engine_args is not None]
        return in_versions[-1] if in_versions else None

    def primary_engine_args(self) -> JsonDocument | None:
        """The served model.json, else the first misplaced one (which the checks still read)."""
        served = self.served_engine_args()
        if served is not None:
            return served
        docs = self.engine_args_documents()
        return docs[0][1] if docs else None

    def checked_engine_args(self) -> JsonDocument | None:
        """The model.json the checks across files and models compare (the served one, else a misplaced one), when it
        is a readable JSON object of a vLLM-backend model."""
        doc = self.primary_engine_args()
        if not self.uses_vllm_backend or doc is None or not doc.ok or not isinstance(doc.data, dict):
            return None
        return doc

    def engine_args_data(self) -> dict:
        """The served model.json's object, {} when there is none or it is not a readable JSON object."""
        doc = self.served_engine_args()
        return doc.data if doc is not None and doc.ok and isinstance(doc.data, dict) else {}

    def engine_settings(self) -> EngineSettings:
        """The served model.json's settings, typed (vLLM's defaults where the file has none)."""
        return read_engine_settings(self.engine_args_data())


@dataclass
class ModelRepository:
    """A repository root and the model directories in it. `selected` are the models the user asked about;
    cross-model checks look at every model of the repository but report only where a selected model is involved."""

    root: Path
    models: list[ModelDirectory] = field(default_factory=list)
    selected: list[ModelDirectory] = field(default_factory=list)

    def is_selected(self, model: ModelDirectory) -> bool:
        return any(m.path == model.path for m in self.selected)


def open_repository(root: Path) -> ModelRepository:
    """The repository at ``root`` with every model in it selected."""
    models = _models_in(root)
    return ModelRepository(root=root, models=models, selected=list(models))


def is_version_name(name: str) -> bool:
    return name.isascii() and name.isdigit()


def looks_like_model_directory(path: Path) -> bool:
    """A directory Triton would treat as a model, or that someone meant as one: it holds a config (or a
    misnamed one), or, with no config anywhere below it, version directories or engine-args files."""
    if has_config(path):
        return True
    try:
        children = list(path.iterdir())
    except OSError:
        return False
    if any(c.is_dir() and has_config(c) for c in children):
        return False  # a repository root whose models hold the configs
    for child in children:
        if child.is_dir() and (is_version_name(child.name) or (child / ENGINE_ARGS_FILE).is_file()):
            return True
        if child.is_file() and child.name in MODEL_FILES:
            return True
    return False


def model_directory_of(path: Path) -> Path:
    """The model directory a file or directory belongs to."""
    if not path.is_file():
        return path
    parent = path.parent
    if path.name == CONFIG_FILE or has_config(parent):
        return parent  # config.pbtxt, or a file beside it (model.json misplaced there is a finding, not a puzzle)
    if is_version_name(parent.name) or has_config(parent.parent):
        return parent.parent  # <model>/<version>/model.json, or a non-numeric version directory like model_v1
    return parent


def has_config(path: Path) -> bool:
    """The directory holds a config.pbtxt, or something that was meant to be one (config.pbxt, other.pbtxt)."""
    try:
        return any(p.is_file() and p.suffix in (".pbtxt", ".pbxt") for p in path.iterdir())
    except OSError:
        return False


def discover(paths: list[Path]) -> list[ModelRepository]:
    """Map command-line paths to repositories and their selected models, in a stable order."""
    repos: dict[Path, ModelRepository] = {}
    for raw in paths:
        path = raw.absolute()
        if not path.exists():
            raise PathError(f"{raw}: no such file or directory")
        if path.is_file():
            model_dirs = [model_directory_of(path)]
        elif looks_like_model_directory(path):
            model_dirs = [path]
        else:
            model_dirs = [p for p in sorted(path.iterdir()) if p.is_dir() and looks_like_model_directory(p)]
            if not model_dirs:
                raise PathError(
                    f"{raw}: no model directories found (expected <repository>/<model>/config.pbtxt "
                    f"and <repository>/<model>/<version>/model.json)"
                )
        for model_dir in model_dirs:
            root = model_dir.parent
            repo = repos.get(root)
            if repo is None:
                repo = repos[root] = ModelRepository(root=root, models=_models_in(root))
            model = next((m for m in repo.models if m.path == model_dir), None)
            if model is None:
                model = ModelDirectory(model_dir)
                repo.models.append(model)
            if not repo.is_selected(model):
                repo.selected.append(model)
    return list(repos.values())


def _models_in(root: Path) -> list[ModelDirectory]:
    try:
        children = sorted(root.iterdir())
    except OSError:
        return []
    return [ModelDirectory(p) for p in children if p.is_dir() and looks_like_model_directory(p)]
