"""``<model>/tune.json``, the evidence `vllm-repo tune` keeps beside a model, as far as other commands read it: the
settings tune wrote into model.json (validate's rule VR510 compares model.json with them). The whole file is
vllm_repo.tune.evidence's; this reading needs nothing but the JSON module."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TUNE_FILE = "tune.json"


def tuned_settings(path: Path) -> tuple[str, dict[str, Any]] | None:
    """(the version directory, the settings tune wrote into its model.json: a value, or None for a key it removed)
    from a tune.json; None when tune wrote nothing (a run without --write, or one stopped by Ctrl-C) or the file
    cannot be read as tune.json."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    written = data.get("written") if isinstance(data, dict) else None
    if not isinstance(written, dict):
        return None
    version, settings = written.get("version"), written.get("settings")
    if not isinstance(version, str) or not isinstance(settings, dict):
        return None
    return version, settings
