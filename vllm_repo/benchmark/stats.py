"""What one load point measured: per-request records in, the figures bench reports out. Pure logic, no I/O.

The definitions follow vLLM's own benchmark client (vllm bench serve) so that the two agree on the same load:
- TTFT: from sending the request to its first response that carries generated output;
- ITL: the gaps between a request's successive responses that carry output, pooled over all requests for the
  percentiles (a response may carry several tokens when the server merges them; the gap is still what a reader of
  the stream waits);
- end-to-end: from sending to the last response that carries output;
- throughput: output tokens (as the server counted them) of the completed requests over the point's wall time, from
  the first request sent to the last one finished;
- percentiles: linear interpolation between the closest ranks (numpy's default).

Goodput counts the requests that met every SLO given, per request (as vLLM's --goodput does): its TTFT at most the
TTFT target, the 99th percentile of its own gaps at most the ITL target, its end-to-end latency at most that target.
A failed request never counts. ``slo_met`` says whether the point as a whole met the targets: the p99 of each
figure across the requests at most its target, and no request failed.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from vllm_repo.errors import UsageError

PERCENTILES = (50, 90, 99)
# The SLO keys --slo takes, and the figure each bounds.
SLO_KEYS = {"ttft_p99_ms": "ttft_ms", "itl_p99_ms": "itl_ms", "e2e_p99_ms": "e2e_ms"}
# Distinct error messages a point lists (with how often each came): enough to see what went wrong.
ERRORS_LISTED = 3


@dataclasses.dataclass
class RequestRecord:
    """One request as the client saw it. Times are in seconds; ``start`` on the clock of the load generator
    (time.perf_counter). ``ttft``, ``e2e`` are None and ``error`` says why when the request failed."""

    start: float
    ok: bool = False
    ttft: float | None = None
    itl: list[float] = dataclasses.field(default_factory=list)
    e2e: float | None = None
    output_tokens: int = 0
    input_tokens: int | None = None
    error: str = ""

    @property
    def end(self) -> float:
        return self.start + (self.e2e or 0.0)


@dataclasses.dataclass(frozen=True)
class Slo:
    """Latency targets in milliseconds; None where not given."""

    ttft_p99_ms: float | None = None
    itl_p99_ms: float | None = None
    e2e_p99_ms: float | None = None

    def given(self) -> dict[str, float]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def __bool__(self) -> bool:
        return bool(self.given())


def parse_slo(text: str | None) -> Slo:
    """--slo ttft_p99_ms=X,itl_p99_ms=Y,e2e_p99_ms=Z (any of them)."""
    if not text:
        return Slo()
    values: dict[str, float] = {}
    for part in text.split(","):
        key, sep, raw = part.strip().partition("=")
        key = key.strip()
        if not sep or key not in SLO_KEYS:
            raise UsageError(
                f"--slo: '{part.strip()}' is not KEY=MILLISECONDS with a key among {', '.join(SLO_KEYS)}",
                hint="e.g. --slo ttft_p99_ms=1000,itl_p99_ms=40",
            )
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"--slo: {key} must be a positive number of milliseconds, not '{raw.strip()}'")
        if key in values:
            raise UsageError(f"--slo: {key} is given twice")
        values[key] = value
    return Slo(**values)


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ``values`` by linear interpolation between closest ranks; NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary_ms(seconds: Sequence[float]) -> dict[str, float | None]:
    """p50/p90/p99 and mean in milliseconds, rounded to microseconds; None where nothing was measured."""
    if not seconds:
        return {**{f"p{p}": None for p in PERCENTILES}, "mean": None}
    out: dict[str, float | None] = {f"p{p}": round(percentile(seconds, p) * 1e3, 3) for p in PERCENTILES}
    out["mean"] = round(sum(seconds) / len(seconds) * 1e3, 3)
    return out


def meets(record: RequestRecord, slo: Slo) -> bool:
    """Whether one request met every target of ``slo`` (see the module's docstring)."""
    if not record.ok or record.ttft is None or record.e2e is None:
        return False
    if slo.ttft_p99_ms is not None and record.ttft * 1e3 > slo.ttft_p99_ms:
        return False
    if slo.itl_p99_ms is not None and record.itl and percentile(record.itl, 99) * 1e3 > slo.itl_p99_ms:
        return False
    return not (slo.e2e_p99_ms is not None and record.e2e * 1e3 > slo.e2e_p99_ms)


def summarize(records: Sequence[RequestRecord], wall_s: float, load: dict[str, Any], slo: Slo) -> dict[str, Any]:
    """One load point's figures (the JSON report's ``points`` entry). ``load``: {"concurrency": N} or
    {"request_rate": R}; ``wall_s``: the wall time the whole point took, first send to last answer or failure."""
    done = [r for r in records if r.ok]
    failed = len(records) - len(done)
    seconds = wall_s if wall_s > 0 else math.inf
    ttfts = [r.ttft for r in done if r.ttft is not None]
    e2es = [r.e2e for r in done if r.e2e is not None]
    itls = [gap for r in done for gap in r.itl]
    output_tokens = sum(r.output_tokens for r in done)
    inputs = [r.input_tokens for r in done if r.input_tokens is not None]
    point: dict[str, Any] = {
        **load,
        "requests": len(records),
        "completed": len(done),
        "failed": failed,
        "duration_s": round(wall_s, 3),
        "requests_per_s": round(len(done) / seconds, 4),
        "output_tokens": output_tokens,
        "output_tokens_per_s": round(output_tokens / seconds, 3),
        "input_tokens_mean": round(sum(inputs) / len(inputs), 2) if inputs else None,
        "ttft_ms": summary_ms(ttfts),
        "itl_ms": summary_ms(itls),
        "e2e_ms": summary_ms(e2es),
        "goodput_rps": round(sum(meets(r, slo) for r in records) / seconds, 4) if slo else None,
        "slo_met": slo_met(slo, ttfts, itls, e2es, failed) if slo else None,
        "errors": [{"error": e, "count": n} for e, n in Counter(r.error for r in records if not r.ok).most_common()][
            :ERRORS_LISTED
        ],
    }
    return point


def slo_met(slo: Slo, ttfts: list[float], itls: list[float], e2es: list[float], failed: int) -> bool:
    """Whether the p99 of each figure is within its target and nothing failed."""
    if failed or not ttfts:
        return False
    measured = {"ttft_p99_ms": ttfts, "itl_p99_ms": itls, "e2e_p99_ms": e2es}
    return all(
        not measured[key] or percentile(measured[key], 99) * 1e3 <= target for key, target in slo.given().items()
    )
