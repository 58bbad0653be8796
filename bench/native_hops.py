"""Where a native stream's time goes between the client and the engine under load (bench/results/backend.md, "Where
the time went"): how much of each stream's time its request spends inside vLLM, and how long the stub takes to admit
it, to send its first response and to send its final one, per load point of bench/backend_throughput.py.

Three steps, on a throwaway copy of the project (the device's copy of the working tree, or `git archive HEAD | tar -x`):

    python bench/native_hops.py instrument COPY_ROOT HOPS_DIR [--backend VARIANT_DIR ...]
    python bench/backend_throughput.py ...                          (run from COPY_ROOT, as usual)
    python bench/native_hops.py report HOPS_DIR [--json FILE]

`instrument` edits the backend's model.py and the benchmark in COPY_ROOT so that each appends one line per event,
`TAG KEY NANOSECONDS` (time.monotonic_ns(), one clock for every process of the host), to HOPS_DIR/hops.<pid>. It refuses
a git checkout: the edits are for measuring, never for committing. Each edit names the code it expects, so a change to
that code stops it rather than timing the wrong place. The backend's events, per request: X execute() called (the
stub's main thread), A admitted on the engine loop, E handed to vLLM, O an output read from vLLM, S a response sent
(the send returned), F the final response sent. The benchmark's: R PATH:STREAMS START END around each measurement.

`report` takes each measurement of a Triton path and sums, over its requests, the time inside vLLM (E to the final
output), in the stub before vLLM (X to E) and after it (final output to F): as a share of the streams' time (streams x
wall), what is outside vLLM is what the engine's batch lacked. Beside them: the median and 90th percentile of each hop,
the spacing of execute() calls (how fast Triton hands the stub its requests), and how long after the measurement
started the last of the first wave reached vLLM.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # its sibling source_edits.py
from source_edits import apply_edits

# Appended after each instrumented module's `from __future__ import annotations`.
RECORDER = """
import os as _hops_os, time as _hops_time
_hops_os.makedirs({dir!r}, exist_ok=True)
_HOPS = open(_hops_os.path.join({dir!r}, "hops.%d" % _hops_os.getpid()), "a", buffering=1 << 20)
_HOPS_EXECUTED = {{}}


def _hop(tag, key, ns=None):
    _HOPS.write("%s %s %d\\n" % (tag, key, _hops_time.monotonic_ns() if ns is None else ns))
"""

_FINAL_SEND = (
    "                self._response(job, output, first), "
    "flags=stub.pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL\n            )\n"
)

EDITS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "vllm_repo/backend/model.py",
        [
            (
                "        self._loop.call_soon_threadsafe(self._admit, requests)\n        return None\n",
                "        _now = _hops_time.monotonic_ns()\n"
                "        for _request in requests:\n"
                "            _HOPS_EXECUTED[id(_request)] = _now\n"
                "        self._loop.call_soon_threadsafe(self._admit, requests)\n        return None\n",
            ),
            (
                "        self._live[job.request_id] = job\n        job.stream_sends = ",
                "        self._live[job.request_id] = job\n"
                "        _hop('X', job.request_id, _HOPS_EXECUTED.pop(id(job.request), 0)); _hop('A', job.request_id)\n"
                "        job.stream_sends = ",
            ),
            (
                "            stream = self.engine.generate(prompt, job.sampling_params, job.request_id, "
                "lora_request=job.lora_request)\n",
                "            _hop('E', job.request_id)\n"
                "            stream = self.engine.generate(prompt, job.sampling_params, job.request_id, "
                "lora_request=job.lora_request)\n",
            ),
            (
                "                async for merged in stream:\n",
                "                async for merged in stream:\n                    _hop('O', job.request_id)\n",
            ),
            (
                "        job.sender.send(self._response(job, output, first), flags=0)\n",
                "        job.sender.send(self._response(job, output, first), flags=0)\n"
                "        _hop('S', job.request_id)\n",
            ),
            (_FINAL_SEND, _FINAL_SEND + "            _hop('F', job.request_id)\n"),
            (
                "    def finalize(self) -> None:\n",
                "    def finalize(self) -> None:\n        _HOPS.flush()\n",
            ),
        ],
    ),
    (
        "bench/backend_throughput.py",
        [
            (
                "            result = loop.run_until_complete(measure(paths[name], c, per))\n",
                "            _started = _hops_time.monotonic_ns()\n"
                "            result = loop.run_until_complete(measure(paths[name], c, per))\n"
                "            _hop('R', f'{name}:{c}:{per}', _started); _hop('R', f'{name}:{c}:{per}'); _HOPS.flush()\n",
            ),
        ],
    ),
]


def instrument(root: Path, hops_dir: str, backends: list[Path] | tuple[Path, ...] = ()) -> None:
    """Edit the copy at ``root``, and the model.py of each other backend directory (--backend-variant's)."""
    backend_edits = dict(EDITS)["vllm_repo/backend/model.py"]
    variants = [(str(b.resolve() / "model.py"), backend_edits) for b in backends]
    apply_edits(root, [*EDITS, *variants], RECORDER.format(dir=hops_dir))


def read(hops_dir: str) -> tuple[list[tuple[str, int, int]], dict[str, dict[str, list[int]]]]:
    """The measurements (name, start, end) in order, and each request's events."""
    measurements: list[tuple[str, int, int]] = []
    requests: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    opened: dict[str, int] = {}
    for path in sorted(glob.glob(os.path.join(hops_dir, "hops.*"))):
        for line in Path(path).read_text().splitlines():
            parts = line.split()
            if len(parts) != 3:
                continue  # a line cut by a process that was killed
            tag, key, ns = parts[0], parts[1], int(parts[2])
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
        },
        "first_wave_in_vllm_after_ms": round((entered[min(c, len(entered)) - 1] - start) * ms, 1),
        "responses_per_request": round(sum(len(r.get("S", ())) + 1 for r in mine) / len(mine), 1),
    }


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
            f"wave in vLLM {row['first_wave_in_vllm_after_ms']:.0f} ms"
        )
    if json_out:
        Path(json_out).write_text(json.dumps(rows, indent=1))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    edit = commands.add_parser("instrument", help="add the timestamps to a copy of the project")
    edit.add_argument("root", type=Path)
    edit.add_argument("hops_dir")
    edit.add_argument("--backend", action="append", type=Path, default=[], help="a variant's backend directory")
    show = commands.add_parser("report", help="each measurement's shares and hops")
    show.add_argument("hops_dir")
    show.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    if args.command == "instrument":
        instrument(args.root, os.path.abspath(args.hops_dir), args.backend)
    else:
        report(args.hops_dir, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
