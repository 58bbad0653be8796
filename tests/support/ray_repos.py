"""A model repository of models whose engine arguments are given as they are (a Ray executor, parallel sizes,
instance counts), for the Ray placement check and launch's Ray preflight."""

from __future__ import annotations

import json
from pathlib import Path

CONFIG = 'backend: "vllm"\nmax_batch_size: 0\nmodel_transaction_policy {{ decoupled: true }}\n{groups}'


def write_model(repo: Path, name: str, engine_args: dict, count: int | None = None) -> Path:
    """``repo``/``name`` with ``engine_args`` as model.json and, given ``count``, that many KIND_MODEL instances."""
    groups = f"instance_group [ {{ count: {count} kind: KIND_MODEL }} ]\n" if count else ""
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(CONFIG.format(groups=groups))
    (repo / name / "1" / "model.json").write_text(json.dumps(engine_args))
    return repo
