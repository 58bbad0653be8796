"""bench's --plot and tune's plot, read back as SVG: no text overlaps another, no label covers a point or a line of
the data, and the data spans each plot's width (the axes fitted to it). Text extents are estimated here on their own
(0.58 of the font size a character, about DejaVu Sans's average), not with the plots' own code."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from itertools import combinations, pairwise
from typing import Any

import pytest

from vllm_repo.benchmark.plot import svg as bench_svg
from vllm_repo.tune.evidence import TuneEvidence
from vllm_repo.tune.report import svg as tune_svg

NS = "{http://www.w3.org/2000/svg}"
Box = tuple[float, float, float, float]


def text_boxes(drawing: str) -> list[tuple[str, Box]]:
    """Every <text>'s content and estimated extent (x0, y0, x1, y1), rotated ones included."""
    root = ET.fromstring(drawing)
    default_size = float(root.get("font-size", "16"))
    found = []
    for element in root.iter(f"{NS}text"):
        content = "".join(element.itertext())
        size = float(element.get("font-size", default_size))
        x, y = float(element.get("x", "0")), float(element.get("y", "0"))
        width = 0.58 * size * len(content)
        shift = {"start": 0.0, "middle": width / 2, "end": width}[element.get("text-anchor", "start")]
        rotated = re.match(r"rotate\(-90 ", element.get("transform", ""))
        if rotated:  # reads upwards: the extent turned a quarter about (x, y)
            box = (x - 0.75 * size, y - width + shift, x + 0.2 * size, y + shift)
        else:
            box = (x - shift, y - 0.75 * size, x - shift + width, y + 0.2 * size)
        found.append((content, box))
    return found


def overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def touches_circle(box: Box, cx: float, cy: float, r: float) -> bool:
    nx, ny = min(max(cx, box[0]), box[2]), min(max(cy, box[1]), box[3])
    return (nx - cx) ** 2 + (ny - cy) ** 2 < r * r


def crosses(box: Box, x1: float, y1: float, x2: float, y2: float) -> bool:
    steps = max(2, int(max(abs(x2 - x1), abs(y2 - y1))))
    return any(
        box[0] < x1 + (x2 - x1) * i / steps < box[2] and box[1] < y1 + (y2 - y1) * i / steps < box[3]
        for i in range(steps + 1)
    )


def circles(drawing: str) -> list[tuple[float, float, float]]:
    root = ET.fromstring(drawing)
    return [(float(c.get("cx", 0)), float(c.get("cy", 0)), float(c.get("r", 0))) for c in root.iter(f"{NS}circle")]


def data_lines(drawing: str) -> list[tuple[float, float, float, float]]:
    """The polylines' segments and the dashed lines (the SLO)."""
    root = ET.fromstring(drawing)
    segments = []
    for line in root.iter(f"{NS}polyline"):
        points = [tuple(map(float, p.split(","))) for p in line.get("points", "").split()]
        segments += [(*a, *b) for a, b in pairwise(points)]
    for line in root.iter(f"{NS}line"):
        if line.get("stroke-dasharray"):
            segments.append(tuple(float(line.get(k, 0)) for k in ("x1", "y1", "x2", "y2")))  # type: ignore[arg-type]
    return segments


def frames(drawing: str) -> list[Box]:
    """Each plot's frame: the unfilled rectangles."""
    root = ET.fromstring(drawing)
    return [
        (float(r.get("x", 0)), float(r.get("y", 0)), float(r.get("x", 0)) + float(r.get("width", 0)),
         float(r.get("y", 0)) + float(r.get("height", 0)))
        for r in root.iter(f"{NS}rect") if r.get("fill") == "none"
    ]  # fmt: skip


def assert_readable(drawing: str) -> None:
    texts = text_boxes(drawing)
    for (a, box_a), (b, box_b) in combinations(texts, 2):
        assert not overlap(box_a, box_b), f"{a!r} overlaps {b!r}"
    for text, box in texts:
        for cx, cy, r in circles(drawing):
            assert not touches_circle(box, cx, cy, r), f"{text!r} covers the point at {cx}, {cy}"
        for segment in data_lines(drawing):
            assert not crosses(box, *segment), f"{text!r} crosses the line {segment}"


def assert_data_spans_each_plot(drawing: str, least: float = 0.7) -> None:
    points = circles(drawing)
    for x0, y0, x1, y1 in frames(drawing):
        inside = [(cx, cy) for cx, cy, _ in points if x0 <= cx <= x1 and y0 <= cy <= y1]
        assert inside, "a plot without its points"
        xs = [cx for cx, _ in inside]
        assert (max(xs) - min(xs)) / (x1 - x0) >= least, f"the data spans {min(xs)}-{max(xs)} of {x0}-{x1}"


# -- bench ------------------------------------------------------------------------------------------------------------


def figures(p50: float, p99: float) -> dict[str, float]:
    return {"p50": p50, "p90": (p50 + p99) / 2, "p99": p99, "mean": p50}


def bench_report(loads: list[dict[str, Any]], throughputs: list[float], slo: dict[str, float]) -> dict[str, Any]:
    points = []
    for n, (load, tokens) in enumerate(zip(loads, throughputs, strict=True)):
        points.append({
            **load, "requests": 100, "completed": 100, "failed": 0, "duration_s": 10.0, "requests_per_s": 10.0,
            "output_tokens": 12800, "output_tokens_per_s": tokens, "input_tokens_mean": 1024.0,
            "ttft_ms": figures(40 + n * 0.8, 52 + n * 1.1), "itl_ms": figures(20 + n * 0.1, 23 + n * 0.15),
            "e2e_ms": figures(2600 + n * 9, 2700 + n * 12), "goodput_rps": None, "slo_met": None, "errors": [],
        })  # fmt: skip
    return {"model": "m", "endpoint": "openai", "url": "u", "prompts": "exact", "input_len": 1024,
            "output_len": 128, "num_prompts": 100, "slo": slo, "notes": [], "interrupted": False,
            "points": points}  # fmt: skip


CLOSE_LOADS = [{"concurrency": c} for c in (1, 2, 4, 8, 16, 32)]
CLOSE_THROUGHPUTS = [940.0, 948.0, 955.0, 961.0, 966.0, 970.0]


@pytest.mark.parametrize(
    "loads, throughputs, slo",
    [
        (CLOSE_LOADS, CLOSE_THROUGHPUTS, {}),
        (CLOSE_LOADS, CLOSE_THROUGHPUTS, {"ttft_p99_ms": 55.0, "itl_p99_ms": 23.5, "e2e_p99_ms": 2740.0}),
        ([{"request_rate": r} for r in (0.5, 1.25, 2.5, 3.75, 5.0, 7.5)], CLOSE_THROUGHPUTS, {"ttft_p99_ms": 1000.0}),
        ([{"concurrency": c} for c in (1, 8, 64)], [120.0, 900.0, 2400.0], {"ttft_p99_ms": 54.0}),
    ],
    ids=["close", "close-with-slo", "rates", "spread"],
)
def test_the_bench_plot_keeps_its_labels_apart_and_fits_its_axes_to_the_data(loads, throughputs, slo):
    report = bench_report(loads, throughputs, slo)
    drawing = bench_svg(report)
    assert_readable(drawing)
    assert_data_spans_each_plot(drawing)
    said = [text for text, _ in text_boxes(drawing)]
    for load in loads:  # each point is labelled, in every panel: beside it, or by a number and the key
        tag = str(load["concurrency"]) if "concurrency" in load else f"{load['request_rate']:g}/s"
        assert said.count(tag) + sum(t.endswith(f": {tag}") for t in said) == 3, (tag, said)


# -- tune -------------------------------------------------------------------------------------------------------------


def candidate(name: str, latency: float, goodput: float, pareto: bool = False) -> dict[str, Any]:
    return {"name": name, "status": "measured", "stage": "coarse", "settings": {}, "e2e_p99_ms": latency,
            "goodput_rps": goodput, "ttft_p99_ms": 800.0, "itl_p99_ms": 40.0, "output_tokens_per_s": 2600.0,
            "slo_met": True, "pareto": pareto}  # fmt: skip


def tune_evidence(candidates: list[dict[str, Any]], slo: dict[str, float]) -> TuneEvidence:
    best = max(candidates, key=lambda c: c["goodput_rps"])
    evidence = TuneEvidence.from_json({"model": "llm", "slo": slo, "candidates": candidates, "winner": best})
    assert len(evidence.measured) == len(candidates)  # every entry read as a measured candidate
    return evidence


TUNED = [  # the README's run (bench/results/tune_gpu_20261205T1152_slo_itl45), whose labels ran into each other
    candidate("defaults", 2076.62, 1.0349, pareto=True),
    candidate("max_num_seqs=16", 2439.01, 0.1828),
    candidate("max_num_seqs=32", 2122.76, 0.7806),
    candidate("max_num_batched_tokens=512", 2758.75, 16.6286),
    candidate("max_num_batched_tokens=1024", 2320.1, 19.532),
    candidate("enable_prefix_caching=false max_num_batched_tokens=1024", 2238.6, 21.005, pareto=True),
]
CROWDED = [  # a grid's worth of long names at close values
    candidate(f"max_num_seqs={s} max_num_batched_tokens={t} enable_prefix_caching={p}", 900 + i * 7, 10 + i * 0.2)
    for i, (s, t, p) in enumerate((s, t, p) for s in (32, 64, 128) for t in (1024, 2048) for p in ("true", "false"))
]


@pytest.mark.parametrize(
    "candidates, slo",
    [(TUNED, {"ttft_p99_ms": 1000.0, "itl_p99_ms": 45.0}), (TUNED, {"e2e_p99_ms": 2500.0}), (CROWDED, {})],
    ids=["readme-run", "with-e2e-slo", "crowded"],
)
def test_the_tune_plot_keeps_its_labels_apart_and_fits_its_axes_to_the_data(candidates, slo):
    drawing = tune_svg(tune_evidence(candidates, slo))
    assert_readable(drawing)
    assert_data_spans_each_plot(drawing)
    said = [text for text, _ in text_boxes(drawing)]
    for c in candidates:  # each candidate is named: beside its point, or by a number and the key
        assert any(c["name"] in text for text in said), c["name"]
    root = ET.fromstring(drawing)
    width = float(root.get("width", 0))
    assert all(box[2] <= width and box[0] >= 0 for _, box in text_boxes(drawing)), "a label runs off the picture"
