"""A model repository written file by file (RepoBuilder) for validate and the commands that read one, and helpers
that run validate on it and pick out the codes it reports."""

from __future__ import annotations

import json
from pathlib import Path

from vllm_repo.validate import validate_paths

OFFICIAL_CONFIG = 'backend: "vllm"\n\ninstance_group [\n  {\n    count: 1\n    kind: KIND_MODEL\n  }\n]\n'
GOOD_ENGINE_ARGS = {"model": "facebook/opt-125m", "gpu_memory_utilization": 0.5, "enforce_eager": True}
VERSION = "0.32.0"


class RepoBuilder:
    """Writes model repositories into a temporary directory."""

    def __init__(self, root: Path):
        self.root = root

    def model(
        self,
        name: str = "llm",
        config: str | None = OFFICIAL_CONFIG,
        engine_args=GOOD_ENGINE_ARGS,
        version: str = "1",
        files: dict[str, str] | None = None,
    ) -> Path:
        model_dir = self.root / name
        model_dir.mkdir(parents=True, exist_ok=True)
        if config is not None:
            (model_dir / "config.pbtxt").write_text(config)
        if engine_args is not None:
            (model_dir / version).mkdir(exist_ok=True)
            text = engine_args if isinstance(engine_args, str) else json.dumps(engine_args, indent=2)
            (model_dir / version / "model.json").write_text(text)
        for rel, text in (files or {}).items():
            path = model_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return model_dir


def run(*paths, **kwargs):
    kwargs.setdefault("vllm_version", VERSION)
    return validate_paths([str(p) for p in paths], **kwargs)


def codes(result, severity: str | None = None) -> set[str]:
    return {d.code for d in result.diagnostics if severity is None or d.severity.value == severity}


def only(result, code: str):
    found = [d for d in result.diagnostics if d.code == code]
    assert found, f"{code} not reported; got {[(d.code, d.message) for d in result.diagnostics]}"
    return found
