"""tune.json, the evidence tune keeps beside the model (``<model>/tune.json``): the SLO and the load, every candidate
it sized or measured (its settings, and its measurements or why it was dropped), the Pareto front, the winner and
its margin over vLLM's defaults, and the settings it wrote into model.json.

validate reads ``written`` back (rule VR510) to tell when model.json no longer has the tuned settings; that reading
is vllm_repo.repository.tune_record's, which other commands import without this package.
"""

from __future__ import annotations

import json
from typing import Any

from vllm_repo.repository.tune_record import TUNE_FILE

__all__ = ["FORMAT", "LATENCY", "TUNE_FILE", "candidate_record", "dumps", "measurement"]
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
