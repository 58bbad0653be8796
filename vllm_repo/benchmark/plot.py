"""--plot: latency against throughput, one panel per figure (TTFT, ITL, end-to-end), a marker per load point with its
p50 and p99, the SLO as a dashed line; the axes fitted to the data and the labels kept apart (plot_layout.py).
Written as SVG by hand (no plotting library): a .svg file, or an .html page that holds the SVG and the table,
self-contained, for a browser."""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

from vllm_repo.benchmark.errors import BenchError
from vllm_repo.benchmark.plot_layout import Box, Keyed, Layout, fit_axis, grid_svg, label_svg, text_width
from vllm_repo.benchmark.report import label_of

PANELS = (("ttft_ms", "TTFT", "ttft_p99_ms"), ("itl_ms", "ITL", "itl_p99_ms"), ("e2e_ms", "end-to-end", "e2e_p99_ms"))
WIDTH, HEIGHT = 360, 280  # one panel
MARGIN = {"left": 58, "right": 14, "top": 30, "bottom": 44}
P50_COLOUR, P99_COLOUR, SLO_COLOUR = "#1f77b4", "#d62728", "#2ca02c"
SUFFIXES = (".html", ".htm", ".svg")
MARKER_R = 4  # a load point's marker
KEY_ROW = 16  # a line of the key under the plot: the labels that found no room beside their points


def nice_max(value: float) -> float:
    """The round number (1, 2 or 5 times a power of ten) at or above ``value``: the top of an axis."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if value <= step * power:
            return float(step * power)
    return float(10 * power)


def _number(value: float) -> str:
    return f"{value:g}" if value < 10_000 else f"{value:.0f}"


def panel(
    points: list[dict[str, Any]], key: str, title: str, slo: float | None, x0: float, keyed: Keyed | None = None
) -> list[str]:
    """One panel's SVG elements, its left edge at ``x0``: the axes fitted to its points (and the SLO), each point's
    load beside its p99 marker, clear of the other labels, markers and lines (``keyed`` numbers those that find no
    room, for the key under the plot)."""
    keyed = keyed if keyed is not None else Keyed()
    plot_w = WIDTH - MARGIN["left"] - MARGIN["right"]
    plot_h = HEIGHT - MARGIN["top"] - MARGIN["bottom"]
    left, top = x0 + MARGIN["left"], MARGIN["top"]
    measured = [p for p in points if p[key]["p50"] is not None]
    x_axis = fit_axis((p["output_tokens_per_s"] for p in measured), left, plot_w)
    latencies = [p[key][stat] for p in measured for stat in ("p50", "p99")]
    y_axis = fit_axis(latencies + ([slo] if slo is not None else []), top, plot_h, reverse=True, horizontal=False)
    x, y = x_axis.at, y_axis.at

    out = [
        f'<text x="{left + plot_w / 2}" y="{top - 10}" text-anchor="middle" font-weight="bold">{title} (ms)</text>',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
    ]
    out += grid_svg(x_axis, y_axis, Box(left, top, left + plot_w, top + plot_h))
    out.append(
        f'<text x="{left + plot_w / 2}" y="{top + plot_h + 34}" text-anchor="middle" font-size="12">'
        "output tokens/s</text>"
    )
    layout = Layout(Box(left, top, left + plot_w, top + plot_h).grown(-2))
    for stat in ("p50", "p99"):
        line = [(x(p["output_tokens_per_s"]), y(p[key][stat])) for p in measured]
        layout.avoid_line(line)
        for cx, cy in line:
            layout.avoid_point(cx, cy, MARKER_R + 1)
    if slo is not None:
        out.append(
            f'<line x1="{left}" y1="{y(slo):.1f}" x2="{left + plot_w}" y2="{y(slo):.1f}" stroke="{SLO_COLOUR}" '
            'stroke-width="2" stroke-dasharray="6,4"/>'
        )
        layout.avoid_line([(left, y(slo)), (left + plot_w, y(slo))])
    for stat, colour in (("p50", P50_COLOUR), ("p99", P99_COLOUR)):
        path = " ".join(f"{x(p['output_tokens_per_s']):.1f},{y(p[key][stat]):.1f}" for p in measured)
        if len(measured) > 1:
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        for p in measured:
            tip = html.escape(f"{label_of(p)}: {stat} {p[key][stat]:g} ms at {p['output_tokens_per_s']:g} tok/s")
            out.append(
                f'<circle cx="{x(p["output_tokens_per_s"]):.1f}" cy="{y(p[key][stat]):.1f}" r="{MARKER_R}" '
                f'fill="{colour}"><title>{tip}</title></circle>'
            )
    labels: list[str] = []
    for p in measured:  # the points' loads first: they belong beside their points; the SLO's value anywhere on it
        tag = str(p.get("concurrency", f"{p.get('request_rate', 0):g}/s"))
        placed, _ = keyed.place(layout, tag, 10, (x(p["output_tokens_per_s"]), y(p[key]["p99"])), MARKER_R + 1)
        if placed is not None:
            labels += label_svg(placed)
    if slo is not None:
        text = f"SLO {_number(slo)} ms"
        half = text_width(text, 11) / 2 + 4
        along = [(left + half + (plot_w - 2 * half) * (8 - i) / 8, y(slo)) for i in range(9)]
        placed = layout.place(text, 11, along, radius=1, directions=("N", "S"), distances=(2.0, 6.0))
        if placed is not None:
            labels += label_svg(placed, SLO_COLOUR)
        else:
            keyed.entries.append(f"{title}: {text}")
    return out + labels


def svg(report: dict[str, Any]) -> str:
    """bench's plot of one report (a comparison's is compare_plot.comparison_svg; output.svg picks)."""
    points = report["points"]
    legend_y = HEIGHT + 8
    keyed = Keyed()
    panels: list[str] = []
    for i, (key, title, slo_key) in enumerate(PANELS):
        panels += panel(points, key, title, report["slo"].get(slo_key), i * WIDTH, keyed)
    height = HEIGHT + 24 + KEY_ROW * len(keyed.entries)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH * 3}" height="{height}" '
        'font-family="sans-serif" font-size="13">',
        f'<rect width="{WIDTH * 3}" height="{height}" fill="white"/>',
        *panels,
    ]
    load = "concurrency" if points and "concurrency" in points[0] else "request rate"
    legend = [
        (P50_COLOUR, "p50", "circle"),
        (P99_COLOUR, "p99", "circle"),
        (SLO_COLOUR, "SLO (p99 target)", "line"),
    ]
    x0 = MARGIN["left"]
    for colour, text, shape in legend:
        if shape == "circle":
            parts.append(f'<circle cx="{x0}" cy="{legend_y}" r="4" fill="{colour}"/>')
        else:
            parts.append(
                f'<line x1="{x0 - 8}" y1="{legend_y}" x2="{x0 + 8}" y2="{legend_y}" stroke="{colour}" '
                'stroke-width="2" stroke-dasharray="6,4"/>'
            )
        parts.append(f'<text x="{x0 + 12}" y="{legend_y + 4}" font-size="12">{text}</text>')
        x0 += 40 + 8 * len(text)
    parts.append(f'<text x="{x0 + 10}" y="{legend_y + 4}" font-size="12" fill="#555">labels: {load}</text>')
    for n, entry in enumerate(keyed.entries):
        parts.append(
            f'<text x="{MARGIN["left"]}" y="{legend_y + 4 + KEY_ROW * (n + 1)}" font-size="11" fill="#555">'
            f"{n + 1}: {html.escape(entry)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts)


def check_plot_path(path: Path, force: bool) -> None:
    """Refuse a plot file before measuring anything, not after: a suffix bench cannot write, or a file that is
    there already without --force."""
    if path.suffix.lower() not in SUFFIXES:
        raise BenchError(
            f"--plot {path}: bench writes .html (a page with the plot and the table) or .svg",
            hint=f"e.g. --plot {path.with_suffix('.html')}",
        )
    if path.exists() and not force:
        raise BenchError(f"--plot {path} exists", hint="pass --force to replace it, or choose another file")
    if not path.parent.is_dir():
        raise BenchError(f"--plot {path}: no directory {path.parent}")


def check_output_path(path: Path, force: bool) -> None:
    """Refuse a report file before measuring anything: one that is there already without --force, or no directory."""
    if path.exists() and not force:
        raise BenchError(f"--output {path} exists", hint="pass --force to replace it, or choose another file")
    if not path.parent.is_dir():
        raise BenchError(f"--output {path}: no directory {path.parent}")
