"""Where a native stream's time goes between the client and the engine under load (bench/results/backend.md, "Where
the time went"): how much of each stream's time its request spends inside vLLM, and how long the stub takes to admit
it, to send its first response and to send its final one, per load point of bench/backend_throughput.py.

Two steps:

    python -m bench.native_hops run HOPS_DIR [backend_throughput's options]
    python -m bench.native_hops report HOPS_DIR [--json FILE]

`run` runs `python -m bench.backend_throughput` with VLLM_REPO_TRACE_HOPS=HOPS_DIR (setting the variable by hand does
the same): the backend's hop hook (vllm_repo/backend/vllm_repo_backend/hops.py) and the benchmark then append one line
per event, `TAG KEY NANOSECONDS` (time.monotonic_ns(), one clock for every process of the host), to HOPS_DIR/hops.<pid>.
A --backend-variant directory records too when its code has the hook. The backend's events, per request: X execute()
called (the stub's main thread), A admitted on the engine loop, E handed to vLLM, O an output read from vLLM, S a
response sent (the send returned), F the final response sent. With ENGINE_PROCESS, A is the stub's admission thread
passing the request on, and E and O come from the engine's process (one clock for every process of the host), with
P there the request's task started (between P and E the prompt is tokenized, which raw AsyncLLM does too), and in the
stub V the message with a request's first output read, W the send thread reaching it; with metrics on there, H the
final output reached the send thread and was held for its stats, L the metrics thread let it go once they were
reported. The benchmark's: R PATH:STREAMS START END around each measurement.

`report` takes each measurement of a Triton path and sums, over its requests, the time inside vLLM (E to the final
output), in the stub before vLLM (X to E) and after it (final output to F): as a share of the streams' time (streams x
wall), what is outside vLLM is what the engine's batch lacked. Beside them: the median and 90th percentile of each hop,
the spacing of execute() calls (how fast Triton hands the stub its requests), and how long after the measurement
started the last of the first wave reached vLLM.
"""

from __future__ import annotations

import itertools
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from .lib.hop_files import hop_commands, hop_lines, run_traced


def read(hops_dir: str) -> tuple[list[tuple[str, int, int]], dict[str, dict[str, list[int]]]]:
    """The measurements (name, start, end) in order, and each request's events."""
    measurements: list[tuple[str, int, int]] = []
    requests: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    opened: dict[str, int] = {}
    for tag, key, ns in hop_lines(hops_dir):
        if tag == "R":
            if key in opened:
                measurements.append((key, opened.pop(key), ns))
            else:
                opened[key] = ns
        else:
            requests[key][tag].append(ns)
    return sorted(measurements, key=lambda m: m[1]), requests


def _quantiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "median": round(statistics.median(values), 2),
        "p90": round(values[len(values) * 9 // 10], 2),
        "max": round(values[-1], 2),
    }


def summarize(name: str, start: int, end: int, requests: dict[str, dict[str, list[int]]]) -> dict | None:
    path, streams, per_stream = name.split(":")
    c = int(streams)
    mine = [r for r in requests.values() if r.get("X") and start <= r["X"][0] <= end and r.get("F") and r.get("O")]
    if not mine or path == "raw":
        return None
    wall = (end - start) / 1e9
    ms = 1e-6
    in_vllm = [(r["O"][-1] - r["E"][0]) * ms for r in mine]
    before = [(r["E"][0] - r["X"][0]) * ms for r in mine]
    after = [(r["F"][0] - r["O"][-1]) * ms for r in mine]
    first = [((r["S"] or r["F"])[0] - r["O"][0]) * ms for r in mine]
    stream_ms = c * wall * 1e3
    executes = sorted(r["X"][0] for r in mine)
    spacing = [(b - a) * ms for a, b in itertools.pairwise(executes)]
    entered = sorted(r["E"][0] for r in mine)
    return {
        "path": path,
        "streams": c,
        "requests_per_stream": int(per_stream),
        "requests": len(mine),
        "wall_s": round(wall, 3),
        "share_of_stream_time": {
            "inside_vllm": round(sum(in_vllm) / stream_ms, 3),
            "stub_before_vllm": round(sum(before) / stream_ms, 3),
            "stub_after_vllm": round(sum(after) / stream_ms, 3),
            "outside_the_stub": round(1 - (sum(in_vllm) + sum(before) + sum(after)) / stream_ms, 3),
        },
        "ms": {
            "execute_to_vllm": _quantiles(before),
            "execute_to_admitted": _quantiles([(r["A"][0] - r["X"][0]) * ms for r in mine]),
            "admitted_to_vllm": _quantiles([(r["E"][0] - r["A"][0]) * ms for r in mine]),
            "first_output_to_sent": _quantiles(first),
            "final_output_to_sent": _quantiles(after),
            "execute_spacing": _quantiles(spacing) if spacing else None,
            **_held_finals(mine),
            **_engine_process_hops(mine),
        },
        "first_wave_in_vllm_after_ms": round((entered[min(c, len(entered)) - 1] - start) * ms, 1),
        "responses_per_request": round(sum(len(r.get("S", ())) + 1 for r in mine) / len(mine), 1),
    }


def _held_finals(mine: list[dict[str, list[int]]]) -> dict[str, dict[str, float]]:
    """Where a final response held for its stats spent its time (ENGINE_PROCESS with metrics): queued before the send
    thread reached it (O to H), waiting for the report (H to L), and queued again until sent (L to F)."""
    held = [r for r in mine if r.get("H") and r.get("L")]
    if not held:
        return {}
    ms = 1e-6
    return {
        "final_output_to_held": _quantiles([(r["H"][0] - r["O"][-1]) * ms for r in held]),
        "final_held_to_released": _quantiles([(r["L"][0] - r["H"][0]) * ms for r in held]),
        "final_released_to_sent": _quantiles([(r["F"][0] - r["L"][0]) * ms for r in held]),
    }


def _engine_process_hops(mine: list[dict[str, list[int]]]) -> dict[str, dict[str, float]]:
    """ENGINE_PROCESS's hops each side of vLLM: the request from the stub's admission to its task in the engine's
    process (A to P) and its prompt's tokenizing (P to E); the first output from vLLM to the stub's receive thread (O
    to V), to the send thread (V to W), and sent (W to S, or F where the first response is the last)."""
    ms = 1e-6
    rows: dict[str, dict[str, float]] = {}
    way_in = [r for r in mine if r.get("P")]
    if way_in:
        rows["admitted_to_task"] = _quantiles([(r["P"][0] - r["A"][0]) * ms for r in way_in])
        rows["tokenizing"] = _quantiles([(r["E"][0] - r["P"][0]) * ms for r in way_in])
    way_out = [r for r in mine if r.get("V") and r.get("W")]
    if way_out:
        rows["first_output_to_read"] = _quantiles([(r["V"][0] - r["O"][0]) * ms for r in way_out])
        rows["read_to_send_thread"] = _quantiles([(r["W"][0] - r["V"][0]) * ms for r in way_out])
        rows["send_thread_to_sent"] = _quantiles([((r["S"] or r["F"])[0] - r["W"][0]) * ms for r in way_out])
    return rows


def report(hops_dir: str, json_out: str | None) -> list[dict]:
    measurements, requests = read(hops_dir)
    rows = [s for s in (summarize(n, a, b, requests) for n, a, b in measurements) if s is not None]
    for row in rows:
        share = row["share_of_stream_time"]
        hops = row["ms"]
        print(
            f"{row['path']:16s} c={row['streams']:<4d} x{row['requests_per_stream']} wall {row['wall_s']:6.3f} s  "
            f"in vLLM {share['inside_vllm']:.3f}  stub before {share['stub_before_vllm']:.3f}  "
            f"after {share['stub_after_vllm']:.3f}  outside {share['outside_the_stub']:.3f}  "
            f"| X->E {hops['execute_to_vllm']['median']:.1f}/{hops['execute_to_vllm']['p90']:.1f} ms  "
            f"first send {hops['first_output_to_sent']['median']:.1f}/{hops['first_output_to_sent']['p90']:.1f}  "
            f"final send {hops['final_output_to_sent']['median']:.1f}/{hops['final_output_to_sent']['p90']:.1f}  "
            f"exec spacing {hops['execute_spacing']['median'] if hops['execute_spacing'] else 0:.2f}  "
            f"wave in vLLM {row['first_wave_in_vllm_after_ms']:.0f} ms" + _held_text(hops) + _engine_process_text(hops)
        )
    if json_out:
        Path(json_out).write_text(json.dumps(rows, indent=1))
    return rows


def _held_text(hops: dict) -> str:
    if "final_output_to_held" not in hops:
        return ""
    parts = (
        hops[name]["median"] for name in ("final_output_to_held", "final_held_to_released", "final_released_to_sent")
    )
    return "  final: queued/stats/queued {:.1f}/{:.1f}/{:.1f} ms".format(*parts)


def _engine_process_text(hops: dict) -> str:
    names = ("admitted_to_task", "tokenizing", "first_output_to_read", "read_to_send_thread", "send_thread_to_sent")
    if not all(name in hops for name in names):
        return ""
    return "  in: to task/tokenize {:.2f}/{:.2f}  first out: read/send thread/sent {:.2f}/{:.2f}/{:.2f} ms".format(
        *(hops[name]["median"] for name in names)
    )


def main(argv: list[str] | None = None) -> int:
    parser, show = hop_commands(__doc__.split("\n\n")[0], "bench.backend_throughput")
    show.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_traced("bench.backend_throughput", args.hops_dir, args.bench_args)
    report(args.hops_dir, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
