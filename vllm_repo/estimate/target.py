"""What `vllm-repo estimate MODEL` was given: a Hugging Face repo id, a local model directory, or a model
directory of a Triton model repository, whose newest <version>/model.json supplies the engine args."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_repo.errors import UsageError
from vllm_repo.repository import ENGINE_ARGS_FILE, ModelDirectory


@dataclass
class Target:
    model: str
    """What load_model_facts reads: a repo id or a directory."""
    engine_args: dict[str, Any] = field(default_factory=dict)
    model_json: Path | None = None


def resolve_target(model: str) -> Target:
    """What ``model`` names; raises UsageError for a Triton model directory whose model.json can't be used."""
    path = Path(model).expanduser()
    if not path.is_dir() or (path / "config.json").is_file():
        return Target(model)
    triton_model = ModelDirectory(path)
    doc = triton_model.served_engine_args()
    if doc is None and (path / ENGINE_ARGS_FILE).is_file():
        raise UsageError(
            f"{path / ENGINE_ARGS_FILE}: Triton reads model.json from the version directory",
            hint=f"move it to {path / '1' / ENGINE_ARGS_FILE}",
        )
    if doc is None:
        raise UsageError(
            f"{path}: neither a Hugging Face model directory (no config.json) nor a Triton model "
            "directory (no <version>/model.json)"
        )
    if doc.problem is not None:
        raise UsageError(f"{doc.path}: {doc.problem.message}", hint=f"`vllm-repo validate {path}` shows where")
    if not isinstance(doc.data, dict):
        raise UsageError(f"{doc.path}: must be a JSON object of vLLM engine args")
    inner = doc.data.get("model")
    if not isinstance(inner, str) or not inner:
        raise UsageError(f'{doc.path}: no "model" key (vLLM would download its default model)')
    inner_path = Path(inner).expanduser()
    if not inner_path.is_absolute() and (doc.path.parent / inner_path).is_dir():
        inner = str(doc.path.parent / inner_path)
    return Target(inner, doc.data, doc.path)
