"""Models' config.json files as their publishers wrote them (tests/estimate/data/configs), for tests that need a
real architecture without weights."""

import json
from pathlib import Path

CONFIGS = Path(__file__).resolve().parent / "estimate" / "data" / "configs"


def published_config(name: str) -> dict:
    """A model's config.json as its publisher wrote it (tests/estimate/data/configs), without weights."""
    return json.loads((CONFIGS / f"{name}.json").read_text())
