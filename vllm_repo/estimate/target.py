"""What `vllm-repo estimate MODEL` was given: a Hugging Face repo id, a local model directory, or a model
directory of a Triton model repository, whose newest <version>/model.json supplies the engine args."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Target:
    model: str
    """What load_model_facts reads: a repo id or a directory."""
    engine_args: dict[str, Any] = field(default_factory=dict)
    model_json: Path | None = None


def _model_json(model_dir: Path) -> Path | None:
    versions = sorted((p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name))
    for version in reversed(versions):
        if (version / "model.json").is_file():
            return version / "model.json"
    return None


def resolve_target(model: str) -> Target:
    path = Path(model).expanduser()
    if path.is_dir() and not (path / "config.json").is_file():
        model_json = _model_json(path)
        if model_json is None and (path / "model.json").is_file():
            raise ValueError(f"{path / 'model.json'}: Triton reads model.json from the version directory; "
                             f"move it to {path / '1' / 'model.json'}")
        if model_json is None:
            raise ValueError(f"{path}: neither a Hugging Face model directory (no config.json) nor a Triton model "
                             "directory (no <version>/model.json)")
        try:
            engine_args = json.loads(model_json.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ValueError(f"{model_json}: not valid JSON ({exc}); `vllm-repo validate {path}` shows where"
                             ) from None
        if not isinstance(engine_args, dict):
            raise ValueError(f"{model_json}: must be a JSON object of vLLM engine args")
        inner = engine_args.get("model")
        if not isinstance(inner, str) or not inner:
            raise ValueError(f"{model_json}: no \"model\" key (vLLM would download its default model)")
        inner_path = Path(inner).expanduser()
        if not inner_path.is_absolute() and (model_json.parent / inner_path).is_dir():
            inner = str(model_json.parent / inner_path)
        return Target(inner, engine_args, model_json)
    return Target(model)
