"""How a tune is shown: a table of the candidates (the Pareto front marked), the winner and its margin over vLLM's
defaults, the candidates dropped and why; and the plot, goodput against p99 latency, in bench's style (plot.py's
axes, colours and file kinds)."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from pathlib import Path

from vllm_repo.benchmark.plot import MARGIN, P50_COLOUR, P99_COLOUR, SLO_COLOUR
from vllm_repo.benchmark.plot_layout import Axis, Box, Keyed, Layout, fit_axis, grid_svg, label_svg
from vllm_repo.files import write_atomic
from vllm_repo.tune.evidence import CandidateRecord, TuneEvidence


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def load_text(evidence: TuneEvidence) -> str:
    run = evidence.conditions
    ((kind, values),) = run.load.items()
    load = f"{kind.replace('_', ' ')} {', '.join(f'{v:g}' for v in values)}"
    if run.dataset:
        lengths = f"prompts of {run.dataset}"
    else:
        lengths = f"{run.input_len} tokens in, {run.output_len} out"
    return f"{load}; {lengths}; {run.num_prompts} requests per point"


def winner_text(evidence: TuneEvidence) -> str:
    winner = evidence.winner
    if winner is None:
        return "no winner: no candidate was measured to the end"
    text = f"winner: {winner.name}: goodput {winner.goodput_rps:g} req/s, p99 end-to-end {_ms(winner.e2e_p99_ms)} ms"
    defaults = evidence.defaults
    if defaults is None:
        return text + " (vLLM's defaults were not measured)"
    if evidence.margin_over_defaults is None:
        return text + f" (vLLM's defaults: goodput {defaults.goodput_rps:g} req/s, no request within the SLO)"
    return text + (
        f", {evidence.margin_over_defaults:.2f}x vLLM's defaults ({defaults.goodput_rps:g} req/s, "
        f"p99 end-to-end {_ms(defaults.e2e_p99_ms)} ms)"
    )


def to_text(evidence: TuneEvidence) -> str:
    run = evidence.conditions
    lines = [
        f"{run.model} (vLLM {run.vllm_version}), sized {run.sized}",
        "SLO: " + ", ".join(f"{k} <= {v:g}" for k, v in run.slo.items()),
        "load: " + load_text(evidence),
    ]
    lines += [f"note: {n}" for n in evidence.notes]
    lines.append("")
    head = ["", "candidate", "stage", "goodput req/s", "TTFT p99", "ITL p99", "E2E p99", "out tok/s", "SLO"]
    rows = [head]
    winner = evidence.winner.name if evidence.winner is not None else None
    for c in evidence.candidates:
        if c.status == "dropped":
            continue
        mark = ">" if c.name == winner else "*" if c.pareto else ""
        m = c.figures
        if c.status in ("measured", "interrupted") and m is not None and m.points:
            figures = [
                f"{m.goodput_rps or 0.0:.2f}",
                _ms(m.ttft_p99_ms),
                _ms(m.itl_p99_ms),
                _ms(m.e2e_p99_ms),
                f"{m.output_tokens_per_s or 0.0:.1f}",
                ("met" if m.slo_met else "missed") + (" (interrupted)" if c.status == "interrupted" else ""),
            ]
        else:
            figures = ["-", "-", "-", "-", "-", c.status]
        rows.append([mark, c.name, c.stage, *figures])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
    lines.append("(ms; > the winner, * the Pareto front of goodput against p99 end-to-end latency)")
    for c in evidence.candidates:
        if c.runs:
            runs = ", ".join(f"{r.goodput_rps:g}" + (f" ({r.status})" if r.status else "") for r in c.runs)
            lines.append(f"measured {len(c.runs)} times: {c.name}: goodput {runs} req/s, the mean shown")
        if c.status in ("dropped", "failed"):
            lines.append(f"{c.status}: {c.name}: {c.reason.splitlines()[0] if c.reason else ''}")
    lines.append("")
    lines.append(winner_text(evidence))
    taken = evidence.reused
    taken_text = f", {taken} taken as measured in {evidence.resumed_from}" if taken else ""
    lines.append(f"{evidence.measurements} measurement(s) in {evidence.wall_s:.0f} s{taken_text}")
    if evidence.stopped == "budget" and not evidence.confirmed:
        lines.append("the time budget was spent before the best was measured again: --write does not take it")
    elif evidence.stopped == "budget":
        lines.append("the time budget was spent: the search stopped there, the winner is the best measured")
    elif evidence.stopped == "interrupted":
        lines.append("interrupted: the candidates above are those measured before the stop; nothing was written")
    elif evidence.winner is not None and not evidence.confirmed:
        lines.append("the confirmations were spent before the best was measured again: --write does not take it")
    return "\n".join(lines)


def to_json(evidence: TuneEvidence) -> str:
    return json.dumps(evidence.to_json(), indent=2)


# ---------------------------------------------------------------------------------------------------------------------
# The plot
# ---------------------------------------------------------------------------------------------------------------------

WIDTH, HEIGHT = 640, 420
MARKER_R, WINNER_R = 4, 6
KEY_ROW = 15  # a line of the key under the plot: the names that found no room beside their points


def _latency(c: CandidateRecord) -> float:
    return c.latency_ms or 0.0


def _goodput(c: CandidateRecord) -> float:
    return c.goodput_rps or 0.0


def svg(evidence: TuneEvidence) -> str:
    """Goodput against p99 end-to-end latency, a marker per measured candidate named beside it (plot_layout.py keeps
    the names apart, and clear of the markers and lines; one that finds no room is numbered, and named in the key
    under the plot), the axes fitted to the candidates (and the end-to-end SLO, a dashed line)."""
    measured = [c for c in evidence.measured if c.latency_ms is not None]
    plot_w = WIDTH - MARGIN["left"] - MARGIN["right"]
    plot_h = HEIGHT - MARGIN["top"] - MARGIN["bottom"] - 20
    left, top = MARGIN["left"], MARGIN["top"]
    area = Box(left, top, left + plot_w, top + plot_h)
    slo = evidence.conditions.slo.get("e2e_p99_ms")
    x_axis = fit_axis([_latency(c) for c in measured] + ([slo] if slo is not None else []), left, plot_w)
    y_axis = fit_axis((_goodput(c) for c in measured), top, plot_h, reverse=True, horizontal=False)
    x, y = x_axis.at, y_axis.at

    out = _frame_svg(evidence.conditions.model, area, x_axis, y_axis)
    winner = evidence.winner.name if evidence.winner is not None else None
    layout = Layout(area.grown(-2))
    for c in measured:
        layout.avoid_point(x(_latency(c)), y(_goodput(c)), (WINNER_R if c.name == winner else MARKER_R) + 1)
    if slo is not None:
        out.append(
            f'<line x1="{x(slo):.1f}" y1="{top}" x2="{x(slo):.1f}" y2="{top + plot_h}" stroke="{SLO_COLOUR}" '
            'stroke-width="2" stroke-dasharray="6,4"/>'
        )
        layout.avoid_line([(x(slo), top), (x(slo), top + plot_h)])
    out += _candidates_svg(measured, winner, layout, x, y)
    labels, keyed = _candidate_labels(measured, winner, layout, x, y)
    if slo is not None:  # after the candidates: the target's value may go anywhere along its line
        along = [(x(slo), top + 8 + (plot_h - 16) * i / 8) for i in range(9)]
        placed = layout.place(f"SLO {slo:g} ms", 11, along, radius=1, directions=("E", "W"), distances=(3.0,))
        if placed is not None:
            labels += label_svg(placed, SLO_COLOUR)
        else:
            keyed.entries.append(f"the dashed line: SLO {slo:g} ms")
    legend_y = top + plot_h + 52
    out += labels
    out += _legend_svg(left, legend_y, keyed.entries)
    height = max(HEIGHT, legend_y + 12 + KEY_ROW * len(keyed.entries))
    head = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" '
        'font-size="13">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    return "\n".join([*head, *out, "</svg>"])


def _frame_svg(model: str, area: Box, x_axis: Axis, y_axis: Axis) -> list[str]:
    """The title, the plot's border and grid, and the axes' names."""
    left, top, plot_w, plot_h = area.x0, area.y0, area.x1 - area.x0, area.y1 - area.y0
    return [
        f'<text x="{left + plot_w / 2}" y="{top - 10}" text-anchor="middle" font-weight="bold">'
        f"{html.escape(model)}: goodput against p99 end-to-end latency</text>",
        f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#999"/>',
        *grid_svg(x_axis, y_axis, area),
        f'<text x="{left + plot_w / 2}" y="{top + plot_h + 34}" text-anchor="middle" font-size="12">'
        "p99 end-to-end latency (ms)</text>",
        f'<text x="14" y="{top + plot_h / 2}" text-anchor="middle" font-size="12" '
        f'transform="rotate(-90 14 {top + plot_h / 2})">goodput (req/s)</text>',
    ]


def _candidates_svg(
    measured: list[CandidateRecord],
    winner: str | None,
    layout: Layout,
    x: Callable[[float], float],
    y: Callable[[float], float],
) -> list[str]:
    """The Pareto front's line (kept clear of the labels) and a marker per candidate, the winner's larger."""
    out = []
    front = [c for c in sorted(measured, key=lambda c: _latency(c)) if c.pareto]
    if len(front) > 1:
        line = [(x(_latency(c)), y(_goodput(c))) for c in front]
        layout.avoid_line(line)
        path = " ".join(f"{px:.1f},{py:.1f}" for px, py in line)
        out.append(f'<polyline points="{path}" fill="none" stroke="{P99_COLOUR}" stroke-width="1.5"/>')
    for c in measured:
        colour = P99_COLOUR if c.pareto else P50_COLOUR
        radius = WINNER_R if c.name == winner else MARKER_R
        tip = html.escape(f"{c.name}: {_goodput(c):g} req/s at {_latency(c):g} ms")
        cx, cy = x(_latency(c)), y(_goodput(c))
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{radius}" fill="{colour}"><title>{tip}</title></circle>')
    return out


def _candidate_labels(
    measured: list[CandidateRecord],
    winner: str | None,
    layout: Layout,
    x: Callable[[float], float],
    y: Callable[[float], float],
) -> tuple[list[str], Keyed]:
    """The candidates' names beside their markers, and the key of those that found no room."""
    labels: list[str] = []
    # The winner first, then the best goodput down: where room runs out, the lesser candidates go to the key.
    keyed = Keyed()
    for c in sorted(measured, key=lambda c: (c.name != winner, -_goodput(c))):
        label = c.name + (" (winner)" if c.name == winner else "")
        radius = (WINNER_R if c.name == winner else MARKER_R) + 1
        placed, _ = keyed.place(layout, label, 10, (x(_latency(c)), y(_goodput(c))), radius)
        if placed is not None:
            labels += label_svg(placed)
    return labels, keyed


def _legend_svg(left: float, legend_y: float, key_entries: list[str]) -> list[str]:
    """The markers' legend, and the key: the numbered names under the plot."""
    out = [
        f'<circle cx="{left}" cy="{legend_y}" r="4" fill="{P99_COLOUR}"/>',
        f'<text x="{left + 10}" y="{legend_y + 4}" font-size="12">Pareto front</text>',
        f'<circle cx="{left + 120}" cy="{legend_y}" r="4" fill="{P50_COLOUR}"/>',
        f'<text x="{left + 130}" y="{legend_y + 4}" font-size="12">other candidates</text>',
    ]
    for n, entry in enumerate(key_entries):
        out.append(
            f'<text x="{left}" y="{legend_y + 4 + KEY_ROW * (n + 1)}" font-size="10" fill="#555">'
            f"{n + 1}: {html.escape(entry)}</text>"
        )
    return out


def page(evidence: TuneEvidence) -> str:
    title = html.escape(f"vllm-repo tune: {evidence.conditions.model}")
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>\n'
        f'<body style="font-family: sans-serif">\n<h2>{title}</h2>\n{svg(evidence)}\n<pre>'
        + html.escape(to_text(evidence))
        + "</pre>\n</body></html>\n"
    )


def write_plot(path: Path, evidence: TuneEvidence) -> None:
    write_atomic(path, svg(evidence) + "\n" if path.suffix.lower() == ".svg" else page(evidence))
