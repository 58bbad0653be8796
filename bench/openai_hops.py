"""Where a streamed request's time to first token goes through the gateway, hop by hop (bench/results/openai_gateway.md,
"Where one stream's first token waits").

Two steps, on a throwaway copy of the project (the device's copy of the working tree, or `git archive HEAD | tar -x`):

    python bench/openai_hops.py instrument COPY_ROOT HOPS_DIR
    python bench/openai_gateway_device.py ... --concurrency 1 --triton-trace HOPS_DIR     (run from COPY_ROOT)
    python bench/openai_hops.py report HOPS_DIR [--skip N]

`instrument` edits the gateway's and the backend's source in COPY_ROOT so that each appends one line per event,
`TAG KEY NANOSECONDS` (time.monotonic_ns(), the clock Triton's trace uses too), to HOPS_DIR/hops.<pid>. It refuses
a git checkout: the edits are for measuring, never for committing. Each edit names the code it expects, so a change
to that code stops it with the edit that no longer applies rather than timing the wrong place.
`--triton-trace` has Triton write its own trace of every request (level TIMESTAMPS) beside them. `report` joins the
three by the gateway's stream id and Triton's request id, and prints the median of each hop. It is meant for one
stream at a time: it pairs some events by their order in the files.
"""

from __future__ import annotations

import argparse
import glob
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
_HOPS = open(_hops_os.path.join({dir!r}, "hops.%d" % _hops_os.getpid()), "a", buffering=1)


def _hop(tag, key, ns=None):
    _HOPS.write("%s %s %d\\n" % (tag, key, _hops_time.monotonic_ns() if ns is None else ns))
"""

# (file, [(code as it is, the same code with its timestamp)]). The gateway keys its events by the stream socket's
# stream id (GI and G2 by the Triton request id); the backend by the stream id in the envelope.
EDITS: list[tuple[str, list[tuple[str, str]]]] = [
    (
        "vllm_repo/serve/openai/app.py",
        [
            (
                "    async def generate(self, request: web.Request) -> web.StreamResponse:\n",
                "    async def generate(self, request: web.Request) -> web.StreamResponse:\n"
                "        request['_hops_t0'] = _hops_time.monotonic_ns()\n",
            ),
            (
                "        shared = model in self._socket_readers\n",
                "        shared = model in self._socket_readers\n"
                "        _hop('G0', inbox.id, relay.request.get('_hops_t0', 0)); _hop('G1', inbox.id)\n",
            ),
            (
                "                    socket_used = True\n                    await relay.from_socket(item)\n",
                "                    socket_used = True\n                    _hop('G3', inbox.id)\n"
                "                    await relay.from_socket(item)\n                    _hop('G4', inbox.id)\n",
            ),
        ],
    ),
    (
        "vllm_repo/serve/openai/stream_socket.py",
        [
            (
                "                inbox = self._inboxes.get(stream_id)\n",
                "                if kind == STREAM_FRAME_DATA:\n                    _hop('GR', stream_id)\n"
                "                inbox = self._inboxes.get(stream_id)\n",
            ),
        ],
    ),
    (
        "vllm_repo/serve/openai/triton.py",
        [
            (
                '        request.id = f"{self._prefix}-{next(self._ids)}"\n',
                '        request.id = f"{self._prefix}-{next(self._ids)}"\n        _hop("GI", request.id)\n',
            ),
            (
                "        while True:\n            yield await self.outbox.get()\n",
                "        while True:\n            _request = await self.outbox.get()\n"
                "            _hop('G2', _request.id)\n            yield _request\n",
            ),
        ],
    ),
    (
        "vllm_repo/backend/model.py",
        [
            (
                "    def execute(self, requests: Sequence[Any]) -> None:\n",
                "    def execute(self, requests: Sequence[Any]) -> None:\n"
                "        self._hops_entry = _hops_time.monotonic_ns()\n",
            ),
            (
                "        self._spawn_openai(openai_serving.new_job(sender, jobs.new_request_id(), admitted))\n",
                "        _sid = admitted.stream_to.id if admitted.stream_to is not None else -1\n"
                "        _hop('B0', _sid, self._hops_entry); _hop('B1', _sid)\n"
                "        self._spawn_openai(openai_serving.new_job(sender, jobs.new_request_id(), admitted))\n",
            ),
        ],
    ),
    (
        "vllm_repo/backend/vllm_repo_backend/openai_serving.py",
        [
            (
                "        sent_body = False\n",
                "        sent_body = False\n"
                "        _sid = job.stream_to.id if job.stream_to is not None else -1\n        _hop('B2', _sid)\n",
            ),
            (
                '            if message["type"] == "http.response.start":\n',
                '            if message["type"] == "http.response.start":\n                _hop("B3", _sid)\n',
            ),
            (
                "        if link.closed:  # the gateway went away: nobody reads this stream any more\n",
                "        _hop('B4', stream_id)\n"
                "        if link.closed:  # the gateway went away: nobody reads this stream any more\n",
            ),
        ],
    ),
]

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


def instrument(root: Path, hops_dir: str) -> None:
    apply_edits(root, EDITS, RECORDER.format(dir=hops_dir))


def read_events(hops_dir: str) -> dict[str, dict[str, list[int]]]:
    """Per request (the gateway's stream id), each event's timestamps in order."""
    events: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    triton_ids: list[str] = []  # Triton request ids in the order the gateway made them (GI)
    streams: list[str] = []  # stream ids in the order the gateway called Triton (G1)
    by_triton_id: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(glob.glob(os.path.join(hops_dir, "hops.*"))):
        for line in Path(path).read_text().splitlines():
            tag, key, ns = line.split()
            if tag in ("GI", "G2"):
                by_triton_id[key][tag].append(int(ns))
                if tag == "GI":
                    triton_ids.append(key)
                continue
            events[key][tag].append(int(ns))
            if tag == "G1":
                streams.append(key)
    traces: dict[str, dict[str, int]] = {}
    for path in glob.glob(os.path.join(hops_dir, "trace.txt*")):
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    edit = commands.add_parser("instrument", help="add the timestamps to a copy of the project")
    edit.add_argument("root", type=Path)
    edit.add_argument("hops_dir")
    show = commands.add_parser("report", help="the median of each hop")
    show.add_argument("hops_dir")
    show.add_argument("--skip", type=int, default=0, help="leave out the first N requests (the warm-up's)")
    args = parser.parse_args(argv)
    if args.command == "instrument":
        instrument(args.root, os.path.abspath(args.hops_dir))
    else:
        report(args.hops_dir, args.skip)
    return 0


if __name__ == "__main__":
    sys.exit(main())
