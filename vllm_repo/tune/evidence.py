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

__all__ = [
    "FORMAT", "LATENCY", "MEASURED_KEYS", "RUN_KEYS", "TUNE_FILE",
    "add_run", "candidate_record", "dumps", "measurement", "reusable",
]  # fmt: skip
FORMAT = 1
# The latency the Pareto front and the tie-break use: the p99 of end-to-end latency, which holds TTFT and ITL both.
LATENCY = "e2e_p99_ms"
# What makes two runs' measurements comparable: the same model.json to start from, engine release, GPU, SLO, load and
# prompts. A run resumed from a tune.json takes its measured candidates only where every one of these is the same.
RUN_KEYS = (
    "model", "version", "base_args", "vllm_version", "sized", "slo", "load", "input_len", "output_len", "dataset",
    "num_prompts", "seed",
)  # fmt: skip
# A measured candidate's figures, as measurement() makes them.
MEASURED_KEYS = ("goodput_rps", LATENCY, "ttft_p99_ms", "itl_p99_ms", "output_tokens_per_s", "slo_met", "failed",
                 "points", "load_s", "measure_s")  # fmt: skip


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


def add_run(entry: dict[str, Any], status: str, **figures: Any) -> None:
    """A measured candidate measured again (the search's confirmation): each measurement's figures go under
    ``runs`` (the first's included), and the entry's goodput and latency become their means. A run that failed
    scores no goodput, at the first run's latency."""
    runs = entry.setdefault("runs", [{k: entry[k] for k in MEASURED_KEYS if k in entry and k != "points"}])
    run = {k: v for k, v in figures.items() if k != "points"}
    if status != "measured":
        run.update(status=status, goodput_rps=0.0, **{LATENCY: runs[0][LATENCY]})
    runs.append(run)
    entry["goodput_rps"] = round(sum(r["goodput_rps"] for r in runs) / len(runs), 4)
    entry[LATENCY] = round(sum(r[LATENCY] for r in runs) / len(runs), 3)


def dumps(evidence: dict[str, Any]) -> str:
    return json.dumps(evidence, indent=2) + "\n"


def reusable(previous: dict[str, Any], run: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The measured candidates of an earlier run's evidence that this run (its RUN_KEYS values) may take as they are,
    and, where it may take none, what differs."""
    differing = [key for key in RUN_KEYS if previous.get(key) != run.get(key)]
    if differing:
        return [], differing
    candidates = previous.get("candidates")
    return [c for c in candidates if _measured(c)] if isinstance(candidates, list) else [], []


def _measured(candidate: Any) -> bool:
    """A measured candidate's entry with what a search needs of it (a file edited by hand may lack it)."""
    return (
        isinstance(candidate, dict)
        and candidate.get("status") == "measured"
        and isinstance(candidate.get("settings"), dict)
        and isinstance(candidate.get("goodput_rps"), (int, float))
        and isinstance(candidate.get(LATENCY), (int, float))
    )
