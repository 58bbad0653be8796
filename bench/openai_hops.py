"""Where a streamed request's time to first token goes through the gateway, hop by hop (bench/results/openai_gateway.md,
"Where one stream's first token waits").

Two steps:

    python -m bench.openai_hops run HOPS_DIR [openai_gateway_device's options] --concurrency 1
    python -m bench.openai_hops report HOPS_DIR [--skip N]

`run` runs `python -m bench.openai_gateway_device --triton-trace HOPS_DIR` with VLLM_REPO_TRACE_HOPS=HOPS_DIR
(setting the variable by hand does the same): the gateway and the backend, through the hop hook
(vllm_repo/backend/vllm_repo_backend/hops.py), append one line per event, `TAG KEY NANOSECONDS` (time.monotonic_ns(),
the clock Triton's trace uses too), to HOPS_DIR/hops.<pid>, and `--triton-trace` has Triton write its own trace of
every request (level TIMESTAMPS) beside them. `report` joins the three by the gateway's stream id and Triton's request
id, and prints the median of each hop. It is meant for one stream at a time: it pairs some events by their order in
the files.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from .lib.hop_files import hop_commands, hop_lines, run_traced

# The gateway keys its events by the stream socket's stream id (GI and G2 by the Triton request id); the backend by
# the stream id in the envelope.
# (label, spans): a hop's time is the sum of its spans, each (start event, end event). Events: G* the gateway's, B* the
# backend's, T:NAME Triton's trace; [1] the second occurrence (the first content chunk follows vLLM's role chunk).
HOPS: list[tuple[str, tuple[tuple[str, str], ...]]] = [
    ("gateway handler to its Triton call", (("G0", "G1"),)),
    ("the call to the gRPC write", (("G1", "G2"),)),
    ("the gRPC write to Triton's read of it", (("G2", "T:GRPC_WAITREAD_END"),)),
    ("Triton: read to queue", (("T:GRPC_WAITREAD_END", "T:QUEUE_START"),)),
    ("Triton: queue to the model instance", (("T:QUEUE_START", "T:COMPUTE_START"),)),
    ("the model instance to execute() (the stub's IPC)", (("T:COMPUTE_START", "B0"),)),
    ("execute(): the envelope read, the request handed over", (("B0", "B1"),)),
    ("the hand-off to the request's task on the engine loop", (("B1", "B2"),)),
    ("vLLM's app: the task to the response's start", (("B2", "B3"),)),
    ("vLLM: the response's start to the first chunk", (("B3", "B4"),)),
    ("the first chunk to the first content chunk", (("B4", "B4[1]"),)),
    ("the first chunk to the gateway's read of it", (("B4", "GR"),)),
    ("the read to the request's handler", (("GR", "G3"),)),
    ("the handler to the bytes written to the client", (("G3", "G4"),)),
    ("total: handler to the first content written", (("G0", "G4[1]"),)),
    ("outside vLLM", (("G0", "B2"), ("B4", "G4"))),
]


def triton_trace_args(directory: str) -> list[str]:
    """tritonserver options for a trace of every request, timestamps only, one file per trace."""
    return [
        *("--trace-config", f"triton,file={os.path.join(directory, 'trace.txt')}"),
        *("--trace-config", "triton,log-frequency=1"),
        *("--trace-config", "rate=1"),
        *("--trace-config", "count=-1"),
        *("--trace-config", "level=TIMESTAMPS"),
    ]


def read_events(hops_dir: str) -> dict[str, dict[str, list[int]]]:
    """Per request (the gateway's stream id), each event's timestamps in order."""
    events: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    triton_ids: list[str] = []  # Triton request ids in the order the gateway made them (GI)
    streams: list[str] = []  # stream ids in the order the gateway called Triton (G1)
    by_triton_id: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for tag, key, ns in hop_lines(hops_dir):
        if tag in ("GI", "G2"):
            by_triton_id[key][tag].append(ns)
            if tag == "GI":
                triton_ids.append(key)
            continue
        events[key][tag].append(ns)
        if tag == "G1":
            streams.append(key)
    traces: dict[str, dict[str, int]] = {}
    for path in Path(hops_dir).glob("trace.txt*"):
        try:
            records = json.loads(Path(path).read_text())
        except ValueError:
            continue  # a file Triton is still writing
        request_id, stamps = None, {}
        for record in records:
            request_id = record.get("request_id", request_id)
            stamps.update({t["name"]: t["ns"] for t in record.get("timestamps", ())})
        if request_id:
            traces[request_id] = stamps
    # A stream's Triton request is the one the gateway made right after calling Triton for it (one at a time);
    # requests on streams of their own (before the shared stream is in use) have no GI and no trace match.
    for stream, triton_id in zip(streams[len(streams) - len(triton_ids) :], triton_ids, strict=True):
        events[stream]["G2"] = by_triton_id[triton_id]["G2"]
        for name, ns in traces.get(triton_id, {}).items():
            events[stream][f"T:{name}"] = [ns]
    return {stream: events[stream] for stream in streams}


def at(request: dict[str, list[int]], event: str) -> int | None:
    name, _, index = event.partition("[")
    times = request.get(name, [])
    position = int(index.rstrip("]")) if index else 0
    return times[position] if len(times) > position else None


def span_ms(request: dict[str, list[int]], spans: tuple[tuple[str, str], ...]) -> float | None:
    """The hop's time in ms, or None when one of its events is missing."""
    ends = [(at(request, start), at(request, end)) for start, end in spans]
    if any(a is None or b is None for a, b in ends):
        return None
    return sum(b - a for a, b in ends) / 1e6


def report(hops_dir: str, skip: int) -> dict[str, float]:
    requests = [r for r in read_events(hops_dir).values() if at(r, "B2") is not None and at(r, "G4") is not None]
    requests = requests[skip:]
    medians: dict[str, float] = {}
    print(f"{len(requests)} requests")
    for label, spans in HOPS:
        times = sorted(t for t in (span_ms(r, spans) for r in requests) if t is not None)
        if not times:
            print(f"{label:58s} (no events)")
            continue
        medians[label] = statistics.median(times)
        print(
            f"{label:58s} median {medians[label]:7.3f} ms   p10 {times[len(times) // 10]:7.3f}   "
            f"p90 {times[len(times) * 9 // 10]:7.3f}   n={len(times)}"
        )
    return medians


def main(argv: list[str] | None = None) -> int:
    parser, show = hop_commands(__doc__.split("\n\n")[0], "bench.openai_gateway_device")
    show.add_argument("--skip", type=int, default=0, help="leave out the first N requests (the warm-up's)")
    args = parser.parse_args(argv)
    if args.command == "run":
        trace = ["--triton-trace", os.path.abspath(args.hops_dir)]
        return run_traced("bench.openai_gateway_device", args.hops_dir, [*args.bench_args, *trace])
    report(args.hops_dir, args.skip)
    return 0


if __name__ == "__main__":
    sys.exit(main())
