"""Each candidate's files: the model tune works on (its served version's model.json), a candidate's model.json and
config.pbtxt made from the user's, and their copies written into the server's work copy before each reload."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vllm_repo.repository import ModelDirectory, VersionDirectory, open_repository
from vllm_repo.tune.errors import TuneError
from vllm_repo.tune.server import write_candidate_files
from vllm_repo.tune.space import BATCHING, Candidate


def find_model(repository: Path, name: str) -> tuple[ModelDirectory, VersionDirectory, dict[str, Any]]:
    """The model to tune, the version directory Triton serves (the latest), and its model.json's object."""
    if not repository.is_dir():
        raise TuneError(f"{repository}: no such directory")
    models = [m for m in open_repository(repository).models if m.uses_vllm_backend]
    if not name:
        if len(models) != 1:
            raise TuneError(
                f"{repository} has {len(models)} vLLM models: name the one to tune with --model",
                hint=f"its models: {', '.join(m.name for m in models) or 'none'}",
            )
        model = models[0]
    else:
        found = [m for m in models if m.name == name]
        if not found:
            raise TuneError(
                f"{repository} has no vLLM model '{name}'", hint=f"its models: {', '.join(m.name for m in models)}"
            )
        model = found[0]
    served = [v for v in model.versions if v.engine_args is not None]
    if not served:
        raise TuneError(f"{model.path} has no version directory with a model.json")
    version = served[-1]
    doc = version.engine_args
    assert doc is not None
    if not doc.ok or not isinstance(doc.data, dict):
        raise TuneError(f"{doc.path} is not a JSON object", hint=f"`vllm-repo validate {model.path}` says why")
    return model, version, dict(doc.data)


def candidate_args(original: dict[str, Any], candidate: Candidate) -> dict[str, Any]:
    """The candidate's model.json: the original without its batching settings, then the candidate's changes (keys
    the original has stay where they were)."""
    changes = {**dict.fromkeys(BATCHING), **candidate.settings}
    args = {k: changes.get(k, v) for k, v in original.items()}
    args.update({k: v for k, v in changes.items() if k not in args})
    return {k: v for k, v in args.items() if v is not None or (k in original and k not in changes)}


def config_for(model: ModelDirectory, candidate: Candidate, original_instances: int) -> str | None:
    """config.pbtxt for a candidate whose instances differ from the model's: one engine of tensor_parallel_size GPUs
    per instance, each on GPUs of its own."""
    if candidate.instances == original_instances or model.config is None or model.config.text is None:
        return None
    from vllm_repo.scaffold.plan import placement_config

    tp = int(candidate.settings.get("tensor_parallel_size") or 1)
    groups = [tuple(range(i * tp, (i + 1) * tp)) for i in range(candidate.instances)]
    return placement_config(model.config.text, groups, f": {candidate.instances} engine(s), chosen by vllm-repo tune.")


def instance_count(model: ModelDirectory) -> int:
    doc = model.config
    if doc is None or doc.config is None or not doc.config.instance_group:
        return 1
    return sum(max(group.count, 1) for group in doc.config.instance_group)


class CandidateFiles:
    """A candidate's files, made from the user's model and written into the server's work copy of it."""

    def __init__(self, model: ModelDirectory, version: VersionDirectory, original: dict[str, Any], work_model: Path):
        self.model, self.version, self.original, self.work_model = model, version, original, work_model
        self.original_instances = instance_count(model)

    def write(self, candidate: Candidate) -> None:
        """The candidate's model.json (and config.pbtxt, where its instances differ) into the work copy."""
        write_candidate_files(
            self.work_model,
            self.version.path.name,
            candidate_args(self.original, candidate),
            config_for(self.model, candidate, self.original_instances),
        )
