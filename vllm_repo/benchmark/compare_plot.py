"""A comparison's plot: latency against output throughput, one panel per figure (TTFT, ITL, end-to-end), one line
per side through its load points (p50 solid, p99 dashed, the side's colour), the SLO dashed in green. SVG by hand, as
plot.py draws bench's."""

from __future__ import annotations

import html
from typing import Any

from vllm_repo.benchmark.plot import HEIGHT, MARGIN, PANELS, SLO_COLOUR, WIDTH, _number, nice_max
from vllm_repo.benchmark.report import label_of

SIDE_COLOURS = ("#1f77b4", "#d62728", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
LEGEND_ROW = 18


def _axes(left: float, top: float, x_max: float, y_max: float, title: str) -> list[str]:
    plot_w = WIDTH - MARGIN["left"] - MARGIN["right"]
    plot_h = HEIGHT - MARGIN["top"] - MARGIN["bottom"]
    out = [
        f'<text x="{left + plot_w / 2}" y="{top - 10}" text-anchor="middle" font-weight="bold">{title} (ms)</text>',
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
    ]
    for i in range(6):
        yv, xv = y_max * i / 5, x_max * i / 5
        y = top + plot_h * (1 - yv / y_max)
        x = left + plot_w * xv / x_max
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{_number(yv)}</text>')
        out.append(
            f'<text x="{x:.1f}" y="{top + plot_h + 16}" text-anchor="middle" font-size="11">{_number(xv)}</text>'
        )
    out.append(
        f'<text x="{left + plot_w / 2}" y="{top + plot_h + 34}" text-anchor="middle" font-size="12">'
        "output tokens/s</text>"
    )
    return out


def panel(sides: list[dict[str, Any]], key: str, title: str, slo: float | None, x0: float) -> list[str]:
    plot_w = WIDTH - MARGIN["left"] - MARGIN["right"]
    plot_h = HEIGHT - MARGIN["top"] - MARGIN["bottom"]
    left, top = x0 + MARGIN["left"], MARGIN["top"]
    measured = {s["name"]: [p for p in s["points"] if p[key]["p50"] is not None] for s in sides}
    every = [p for points in measured.values() for p in points]
    x_max = nice_max(max((p["output_tokens_per_s"] for p in every), default=1.0) * 1.1)
    y_max = nice_max(max([p[key]["p99"] for p in every] + [slo or 0.0], default=1.0) * 1.1)

    def xy(p: dict[str, Any], stat: str) -> tuple[float, float]:
        return left + plot_w * p["output_tokens_per_s"] / x_max, top + plot_h * (1 - p[key][stat] / y_max)

    out = _axes(left, top, x_max, y_max, title)
    if slo is not None:
        y = top + plot_h * (1 - slo / y_max)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="{SLO_COLOUR}" '
            'stroke-width="2" stroke-dasharray="2,3"/>'
        )
    for n, side in enumerate(sides):
        colour = SIDE_COLOURS[n % len(SIDE_COLOURS)]
        points = measured[side["name"]]
        for stat, dash in (("p50", ""), ("p99", ' stroke-dasharray="6,4"')):
            path = " ".join("{:.1f},{:.1f}".format(*xy(p, stat)) for p in points)
            if len(points) > 1:
                out.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="1.5"{dash}/>')
            for p in points:
                x, y = xy(p, stat)
                tip = html.escape(
                    f"{side['name']}, {label_of(p)}: {stat} {p[key][stat]:g} ms at {p['output_tokens_per_s']:g} tok/s"
                )
                out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{colour}"><title>{tip}</title></circle>')
    return out


def comparison_svg(report: dict[str, Any]) -> str:
    sides = report["comparison"]["sides"]
    legend_top = HEIGHT + 8
    height = legend_top + LEGEND_ROW * (len(sides) + 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH * 3}" height="{height}" '
        'font-family="sans-serif" font-size="13">',
        f'<rect width="{WIDTH * 3}" height="{height}" fill="white"/>',
    ]
    for i, (key, title, slo_key) in enumerate(PANELS):
        parts += panel(sides, key, title, report["slo"].get(slo_key), i * WIDTH)
    x0 = MARGIN["left"]
    for n, side in enumerate(sides):
        y = legend_top + LEGEND_ROW * n
        colour = SIDE_COLOURS[n % len(SIDE_COLOURS)]
        parts.append(f'<line x1="{x0 - 8}" y1="{y}" x2="{x0 + 8}" y2="{y}" stroke="{colour}" stroke-width="2"/>')
        parts.append(f'<text x="{x0 + 14}" y="{y + 4}" font-size="12">{html.escape(side["name"])}</text>')
    y = legend_top + LEGEND_ROW * len(sides)
    parts.append(
        f'<text x="{x0 - 8}" y="{y + 4}" font-size="12" fill="#555">solid: p50, dashed: p99, one point per load; '
        "green: the SLO</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts)
