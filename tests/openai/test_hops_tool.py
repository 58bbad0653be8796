"""bench/openai_hops.py: `run` turns the hop hook on for the gateway benchmark and has Triton trace every request
into the same directory, and its report joins the three sources of events."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench import openai_hops
from vllm_repo.backend.vllm_repo_backend.hops import TRACE_HOPS


def load_tool():
    return openai_hops


def test_run_records_the_hops_and_triton_trace_in_one_directory(tmp_path, monkeypatch):
    started = []

    def fake_run(argv, env):
        started.append((argv, env))
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(subprocess, "run", fake_run)
    hops = tmp_path / "hops"
    assert openai_hops.main(["run", str(hops), "--concurrency", "1"]) == 0
    ((argv, env),) = started
    assert argv[1:] == ["-m", "bench.openai_gateway_device", "--concurrency", "1", "--triton-trace", str(hops)]
    assert env[TRACE_HOPS] == str(hops)


def test_triton_trace_writes_every_request_with_timestamps_into_the_directory():
    args = openai_hops.triton_trace_args("/tmp/hops")
    assert "triton,file=/tmp/hops/trace.txt" in args and "level=TIMESTAMPS" in args and "rate=1" in args


def write_events(directory: Path, process: str, lines: list[tuple[str, str, int]]) -> None:
    directory.mkdir(exist_ok=True)
    with open(directory / f"hops.{process}", "a") as out:
        out.writelines(f"{tag} {key} {ns}\n" for tag, key, ns in lines)


def test_the_report_joins_gateway_backend_and_triton_events_per_request(tmp_path, capsys):
    """Two requests on the shared stream, 1 ms apart at every hop for the first and 2 ms for the second; the medians
    are the means of the two."""
    hops = tmp_path / "hops"
    for index, (stream, triton_id, step) in enumerate((("1", "ab-1", 1_000_000), ("2", "ab-2", 2_000_000))):
        t0 = (index + 1) * 10**9
        at = [t0 + k * step for k in range(16)]
        write_events(hops, "100", [("G1", stream, at[1]), ("GI", triton_id, at[1]), ("G2", triton_id, at[2])])
        write_events(hops, "100", [("G0", stream, at[0])])
        write_events(
            hops,
            "200",
            [(tag, stream, at[k]) for k, tag in ((6, "B0"), (7, "B1"), (8, "B2"), (9, "B3"), (10, "B4"), (11, "B4"))],
        )
        write_events(hops, "100", [("GR", stream, at[12]), ("G3", stream, at[13]), ("G4", stream, at[14])])
        write_events(hops, "100", [("G3", stream, at[14]), ("G4", stream, at[15])])
        trace = [{"id": index, "model_name": "tiny", "request_id": triton_id}] + [
            {"id": index, "timestamps": [{"name": name, "ns": at[k]}]}
            for k, name in ((3, "GRPC_WAITREAD_END"), (4, "QUEUE_START"), (5, "COMPUTE_START"))
        ]
        (hops / f"trace.txt.{index}").write_text(json.dumps(trace))
    medians = load_tool().report(str(hops), skip=0)
    assert "2 requests" in capsys.readouterr().out
    for label, _ in load_tool().HOPS[:-2]:
        if label == "the first chunk to the gateway's read of it":
            assert medians[label] == pytest.approx(3.0)  # B4 at step 10, GR at step 12
        else:
            assert medians[label] == pytest.approx(1.5), label
    assert medians["total: handler to the first content written"] == pytest.approx(15 * 1.5)
    # Outside vLLM: handler to task (8 steps) and first chunk to first bytes written (4 steps).
    assert medians["outside vLLM"] == pytest.approx(12 * 1.5)
