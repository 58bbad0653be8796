"""A comparison's report: the JSON object (bench's report, its ``points`` the repository's Triton over its first
endpoint, and a ``comparison`` beside them) and the text, one table per load point.

Per side and load point, the figures are those of all its rounds' requests together (summarize over the pooled
records and the rounds' summed wall time). The ratios to the reference side are taken round by round, each round's
figure over the reference's in the same round, and reported as their median with the rounds' range: a side measured
in a fast round is set against the reference in that same round.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from vllm_repo.benchmark.report import _triple, client_limit_note, label_of, server_cpu_text, workload_line
from vllm_repo.benchmark.server_cpu import total
from vllm_repo.benchmark.stats import summarize

if TYPE_CHECKING:
    from vllm_repo.benchmark.compare import CompareRun, Measured, Side

# The figures whose ratio to the reference is reported: name -> (point key, percentile or None).
RATIO_FIGURES: dict[str, tuple[str, str | None]] = {
    "output_tokens_per_s": ("output_tokens_per_s", None),
    "requests_per_s": ("requests_per_s", None),
    "ttft_p50_ms": ("ttft_ms", "p50"),
    "ttft_p99_ms": ("ttft_ms", "p99"),
    "itl_p50_ms": ("itl_ms", "p50"),
    "itl_p99_ms": ("itl_ms", "p99"),
    "e2e_p50_ms": ("e2e_ms", "p50"),
    "e2e_p99_ms": ("e2e_ms", "p99"),
    "goodput_rps": ("goodput_rps", None),
}
# Mismatched requests listed per point (the count says how many there were).
MISMATCHES_LISTED = 10


def figure(point: dict[str, Any], name: str) -> float | None:
    key, stat = RATIO_FIGURES[name]
    value = point[key] if stat is None else point[key][stat]
    return None if value is None else float(value)


def side_round_points(run: CompareRun, side: Side) -> list[list[dict[str, Any]]]:
    """``[round][point]``: each round's summary of each point the side measured in it."""
    loads = run.spec.loads()
    return [
        [summarize(m.records, m.wall_s, loads[i], run.spec.slo) for i, m in enumerate(measured)]
        for measured in side.rounds
    ]


def pooled_points(run: CompareRun, side: Side) -> list[dict[str, Any]]:
    """Per load point, the figures of every round's requests together."""
    points = []
    for i, load in enumerate(run.spec.loads()):
        measured = [rounds[i] for rounds in side.rounds if len(rounds) > i]
        if not measured:
            break
        records = [r for m in measured for r in m.records]
        point = summarize(records, sum(m.wall_s for m in measured), load, run.spec.slo)
        point["rounds"] = len(measured)
        point["client_cpu_s_per_s"] = max(m.client_cpu_s_per_s for m in measured)
        point["server_cpu_by_role"] = pooled_server_cpu(measured)
        point["server_cpu_s_per_s"] = total(point["server_cpu_by_role"])
        points.append(point)
    return points


def pooled_server_cpu(measured: list[Measured]) -> dict[str, float]:
    """The server's CPU seconds a second by role over every round together: each round's weighed by its wall time."""
    wall = sum(m.wall_s for m in measured)
    if wall <= 0:
        return {}
    seconds: dict[str, float] = {}
    for m in measured:
        for role, per_s in m.server_cpu.items():
            seconds[role] = seconds.get(role, 0.0) + per_s * m.wall_s
    return {role: round(s / wall, 3) for role, s in sorted(seconds.items(), key=lambda item: -item[1])}


def ratio(values: list[float | None], references: list[float | None]) -> dict[str, Any]:
    """Per-round ratios, their median and range; rounds where either figure is missing or the reference is 0 are
    left out (None where none is left)."""
    per_round = [
        round(v / r, 4) if v is not None and r is not None and r > 0 else None
        for v, r in zip(values, references, strict=True)
    ]
    kept = [x for x in per_round if x is not None]
    if not kept:
        return {"median": None, "min": None, "max": None, "rounds": per_round}
    return {"median": round(statistics.median(kept), 4), "min": min(kept), "max": max(kept), "rounds": per_round}


def _chat(side: Any) -> bool:
    return side.endpoint == "openai-chat"


def same_work(run: CompareRun, point: int) -> dict[str, Any]:
    """Whether every side was given the same work at load point ``point``: request by request (the same prompt in the
    same round), the same input and output token counts as the reference side's, every request completed. Between a
    chat side and one that sends the prompt as it is, only the output counts are compared: the chat template adds
    tokens of its own to the input."""
    reference = run.reference_side()
    compared, failed = 0, 0
    mismatches: list[dict[str, Any]] = []
    for side in run.sides:
        for r, rounds in enumerate(side.rounds):
            ours = rounds[point].records if len(rounds) > point else []
            refs = reference.rounds[r][point].records if len(reference.rounds[r]) > point else []
            failed += sum(not rec.ok for rec in ours)
            if side is reference or not ours or not refs:
                continue
            same_input = _chat(side) == _chat(reference)
            for index, (mine, theirs) in enumerate(zip(ours, refs, strict=False)):
                if not (mine.ok and theirs.ok):
                    continue
                compared += 1
                if mine.output_tokens != theirs.output_tokens or (
                    same_input and mine.input_tokens != theirs.input_tokens
                ):
                    mismatches.append(
                        {
                            "side": side.name,
                            "round": r + 1,
                            "request": index,
                            "input_tokens": [mine.input_tokens, theirs.input_tokens],
                            "output_tokens": [mine.output_tokens, theirs.output_tokens],
                        }
                    )
    return {
        "same_work": not mismatches and not failed and compared > 0,
        "requests_compared": compared,
        "failed": failed,
        "mismatched": len(mismatches),
        "mismatches": mismatches[:MISMATCHES_LISTED],
    }


def comparison_points(run: CompareRun, per_round: dict[str, list[list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    reference = run.reference_side()
    out = []
    for i, load in enumerate(run.spec.loads()):
        refs = [points[i] if len(points) > i else None for points in per_round[reference.name]]
        if all(p is None for p in refs):
            break
        ratios: dict[str, dict[str, Any]] = {}
        for side in run.sides:
            if side is reference:
                continue
            mine = [points[i] if len(points) > i else None for points in per_round[side.name]]
            ratios[side.name] = {
                name: ratio(
                    [figure(p, name) if p else None for p in mine], [figure(p, name) if p else None for p in refs]
                )
                for name in RATIO_FIGURES
                if name != "goodput_rps" or run.spec.slo
            }
        out.append({**load, **same_work(run, i), "ratios": ratios})
    return out


def report(run: CompareRun) -> dict[str, Any]:
    from vllm_repo.benchmark.run import BenchRun

    spec = run.spec
    first = run.sides[0]
    per_round = {side.name: side_round_points(run, side) for side in run.sides}
    pooled = {side.name: pooled_points(run, side) for side in run.sides}
    base = BenchRun(
        spec,
        url=first.url,
        prompts=run.prompts.source if run.prompts else "",
        notes=run.notes,
        points=pooled[first.name],
        interrupted=run.interrupted,
    ).report()
    base["endpoint"] = first.endpoint
    base["comparison"] = {
        "reference": run.reference_side().name,
        "rounds": run.compare.rounds,
        "order": run.order,
        "placement": run.placement,
        "setup": run.setup,
        "sides": [
            {
                "name": side.name,
                "server": side.server,
                "endpoint": side.endpoint,
                "url": side.url,
                "points": pooled[side.name],
                "rounds": per_round[side.name],
            }
            for side in run.sides
        ],
        "points": comparison_points(run, per_round),
    }
    return base


# ---------------------------------------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------------------------------------


def _ratio_text(value: dict[str, Any] | None, with_range: bool = True) -> str:
    if not value or value["median"] is None:
        return "-"
    text = f"{value['median']:.3f}"
    kept = [x for x in value["rounds"] if x is not None]
    if with_range and len(kept) > 1:
        text += f" ({value['min']:.2f}-{value['max']:.2f})"
    return text


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))).rstrip()
        for r in rows
    ]


def _header(report: dict[str, Any]) -> list[str]:
    comparison, setup = report["comparison"], report["comparison"]["setup"]
    lines = [
        f"{report['model']}: {', '.join(s['name'] for s in comparison['sides'])}; ratios to {comparison['reference']}",
        f"vLLM {setup.get('vllm')}; {setup.get('triton', 'Triton')}; GPU: {setup.get('gpu')}",
    ]
    for name, text in setup.get("metrics", {}).items():
        lines.append(f"metrics, {name}: {text}")
    lines.append(workload_line(report, "load point and round"))
    lines.append(f"{comparison['rounds']} round(s), {comparison['placement']}")
    if report["slo"]:
        lines.append("SLO: " + ", ".join(f"{k} <= {v:g}" for k, v in report["slo"].items()))
    return lines


def to_text(report: dict[str, Any]) -> str:
    """One table per load point: a row per side, its ratio to the reference beside its figures."""
    comparison = report["comparison"]
    slo = bool(report["slo"])
    lines = _header(report)
    for i, cpoint in enumerate(comparison["points"]):
        work = "yes" if cpoint["same_work"] else f"NO ({cpoint['mismatched']} mismatched, {cpoint['failed']} failed)"
        lines += ["", f"{label_of(cpoint)}: same work on every side: {work}"]
        head = ["side", "done", "failed", "out tok/s", "ratio (range)", "TTFT ms", "ITL ms", "E2E ms", "p50 ratio"]
        head += ["goodput req/s", "ratio"] if slo else []
        rows = [head, ["", "", "", "", "", "p50/p90/p99", "p50/p90/p99", "p50/p90/p99", "TTFT/ITL/E2E"]]
        rows[1] += ["", ""] if slo else []
        for side in comparison["sides"]:
            if len(side["points"]) <= i:
                continue
            p = side["points"][i]
            r = cpoint["ratios"].get(side["name"], {})
            p50 = "/".join(_ratio_text(r.get(k), False) for k in ("ttft_p50_ms", "itl_p50_ms", "e2e_p50_ms"))
            row = [side["name"], str(p["completed"]), str(p["failed"]), f"{p['output_tokens_per_s']:.1f}"]
            row += [_ratio_text(r.get("output_tokens_per_s")) if r else "1 (reference)"]
            row += [_triple(p["ttft_ms"]), _triple(p["itl_ms"]), _triple(p["e2e_ms"]), p50 if r else ""]
            if slo:
                row += [f"{p['goodput_rps']:.2f}", _ratio_text(r.get("goodput_rps")) if r else ""]
            rows.append(row)
        lines += _table(rows)
        for side in comparison["sides"]:
            if len(side["points"]) > i and (note := client_limit_note(side["points"][i], f"{side['name']}'s client")):
                lines.append(note)
        for side in comparison["sides"]:
            if len(side["points"]) > i and (text := server_cpu_text(side["points"][i])):
                lines.append(f"server CPU-s/s, {side['name']}: {text}")
        for m in cpoint["mismatches"]:
            lines.append(
                f"  round {m['round']}, request {m['request']}: {m['side']} counted {m['input_tokens'][0]} in / "
                f"{m['output_tokens'][0]} out, {comparison['reference']} {m['input_tokens'][1]} in / "
                f"{m['output_tokens'][1]} out"
            )
    if report["interrupted"]:
        lines.append("interrupted: the figures above are those measured before the stop")
    return "\n".join(lines)
