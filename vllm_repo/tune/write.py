"""``--write``: the winner's settings into the user's model.json (and config.pbtxt where its instances change), each
file replaced atomically and shown as a diff, and the evidence beside the model as ``<model>/tune.json``.

A stopped run (Ctrl-C) writes tune.json only, with what was measured: it has no winner to write. The settings written
are recorded in tune.json's ``written``, which validate compares model.json with (rule VR510).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from vllm_repo.files import write_atomic
from vllm_repo.repository import ENGINE_ARGS_FILE
from vllm_repo.tune.candidates import candidate_args, config_for, instance_count
from vllm_repo.tune.evidence import TUNE_FILE
from vllm_repo.tune.evidence import Written as WrittenSettings
from vllm_repo.tune.run import TuneResult
from vllm_repo.tune.space import BATCHING


@dataclasses.dataclass
class Written:
    diff: str  # model.json and config.pbtxt, as a patch ("" when they already had the winner's settings)
    paths: list[Path]  # every file written, tune.json last


def json_text(original_text: str, data: dict) -> str:
    """``data`` as JSON in the file's own style: indented when the file spans lines, on one line when it did."""
    indent = 2 if "\n" in original_text.strip() else None
    return json.dumps(data, indent=indent) + "\n"


def file_changes(result: TuneResult) -> dict[Path, tuple[str, str]]:
    """path -> (old text, new text) for model.json and config.pbtxt; nothing without a winner."""
    winner = result.winner
    if winner is None:
        return {}
    changes: dict[Path, tuple[str, str]] = {}
    path = result.version.path / ENGINE_ARGS_FILE
    old = path.read_text(encoding="utf-8-sig")
    new_args = candidate_args(result.original_args, winner)
    if new_args != result.original_args:
        changes[path] = (old, json_text(old, new_args))
    config = config_for(result.model, winner, instance_count(result.model))
    if config is not None:
        config_path = result.model.config_path
        changes[config_path] = (config_path.read_text(encoding="utf-8"), config)
    return changes


def write(result: TuneResult) -> Written:
    """Write the winner (when there is one) and tune.json; returns the diff and the files written."""
    from vllm_repo.diagnostics.diagnostic import display_path
    from vllm_repo.diagnostics.fixes import FixPlan

    changes = file_changes(result)
    plan: FixPlan[None] = FixPlan(texts=changes)
    diff = plan.diff({p: display_path(p) for p in changes})
    if result.winner is not None:
        new_args = candidate_args(result.original_args, result.winner)
        tuned = sorted(set(BATCHING) | set(result.winner.settings))
        result.evidence.written = WrittenSettings(
            version=result.version.path.name,
            settings={key: new_args.get(key) for key in tuned},
            instances=result.winner.instances,
        )
    plan.write()
    tune_path = result.model.path / TUNE_FILE
    write_atomic(tune_path, result.evidence.dumps())
    return Written(diff, [*sorted(changes), tune_path])
