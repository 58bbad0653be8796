"""tune.json, the evidence tune keeps beside the model (``<model>/tune.json``): the SLO and the load, every candidate
it sized or measured (its settings, and its measurements or why it was dropped), the Pareto front, the winner and
its margin over vLLM's defaults, and the settings it wrote into model.json.

validate reads ``written`` back (rule VR510) to tell when model.json no longer has the tuned settings; that reading
is this module's ``tuned_settings`` and needs nothing but the JSON module.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TUNE_FILE = "tune.json"
FORMAT = 1
# The latency the Pareto front and the tie-break use: the p99 of end-to-end latency, which holds TTFT and ITL both.
LATENCY = "e2e_p99_ms"


def candidate_record(
    name: str,
    stage: str,
    settings: dict[str, Any],
    instances: int,
    status: str,
    *,
    reason: str | None = None,
    sizing: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One candidate's entry. status: measured, dropped (by the estimator), failed (to load, or every request
    failed), interrupted (Ctrl-C while it was measured: what it got so far)."""
    return {
        "name": name,
        "stage": stage,
        "settings": settings,
        "instances": instances,
        "status": status,
        "reason": reason,
        "sizing": sizing or {},
    }


def measurement(points: list[dict[str, Any]]) -> dict[str, Any]:
    """A candidate's figures from bench's load points: the point with the best goodput stands for it."""
    if not points:
        return {"goodput_rps": None, LATENCY: None, "points": []}
    best = max(points, key=lambda p: (p.get("goodput_rps") or 0.0, -(p["e2e_ms"]["p99"] or float("inf"))))
    return {
        "goodput_rps": best.get("goodput_rps") or 0.0,
        LATENCY: best["e2e_ms"]["p99"],
        "ttft_p99_ms": best["ttft_ms"]["p99"],
        "itl_p99_ms": best["itl_ms"]["p99"],
        "output_tokens_per_s": best["output_tokens_per_s"],
        "slo_met": best.get("slo_met"),
        "failed": best["failed"],
        "points": points,
    }


def dumps(evidence: dict[str, Any]) -> str:
    return json.dumps(evidence, indent=2) + "\n"


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
