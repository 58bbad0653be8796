"""Alternating rounds: on a shared machine noise comes and goes, so the paths of a comparison run back to back in
every round, in an order that turns round by round, and each is set against its baseline of the same round."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

Name = TypeVar("Name")


def round_order(names: Sequence[Name], index: int) -> list[Name]:
    """The paths in the order of round ``index``: turned one place a round, so none always runs first (two paths
    alternate). A negative index (a warm-up round) turns the other way."""
    if not names:
        return []
    shift = index % len(names)
    return [*names[shift:], *names[:shift]]


@dataclass(frozen=True)
class RatioSummary:
    """A path's measure over its baseline's, round by round, with their median and range."""

    per_round: list[float]
    median: float
    low: float
    high: float


def per_round_ratios(
    runs: Sequence[Mapping[str, Any]], baseline: Sequence[Mapping[str, Any]], field: str, digits: int = 3
) -> RatioSummary:
    """``field`` of each run over the baseline's run of the same round. A path measured in the first rounds only is
    set against the baseline's same rounds."""
    ratios = [round(r[field] / b[field], digits) for r, b in zip(runs, baseline[: len(runs)], strict=True)]
    return RatioSummary(ratios, round(statistics.median(ratios), digits), min(ratios), max(ratios))


# A baseline whose own rounds moved further apart than this (highest less lowest, over their median) cannot tell a path
# at 0.98x it from one at 0.96x: on H100 leases raw AsyncLLM's rounds ran 1-2 % apart on a host that held its pace and
# 13-30 % apart on one whose engine core set the pace (bench/results/backend.md).
STEADY_SPREAD = 0.05


def spread(runs: Sequence[Mapping[str, Any]], field: str, digits: int = 3) -> float:
    """How far ``field`` moved over the runs: (highest - lowest) / median."""
    values = [r[field] for r in runs]
    return round((max(values) - min(values)) / statistics.median(values), digits)


def field_medians(runs: Iterable[Mapping[str, Any]], fields: Iterable[str]) -> dict[str, Any]:
    """The median over the runs of each field that every run has a value for."""
    runs = list(runs)
    return {
        field: statistics.median(r[field] for r in runs)
        for field in fields
        if all(r.get(field) is not None for r in runs)
    }
