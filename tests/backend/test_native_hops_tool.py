"""bench/native_hops.py: `run` turns the backend's hop hook on for the benchmark it runs, and its report splits the
streams' time as its events say."""

from __future__ import annotations

import subprocess

from bench import native_hops
from vllm_repo.backend.vllm_repo_backend.hops import TRACE_HOPS


def load_tool():
    return native_hops


def test_run_starts_the_benchmark_with_the_hops_recorded_into_the_directory(tmp_path, monkeypatch):
    started = []

    def fake_run(argv, env):
        started.append((argv, env))
        return subprocess.CompletedProcess(argv, 3)

    monkeypatch.setattr(subprocess, "run", fake_run)
    assert native_hops.main(["run", str(tmp_path / "hops"), "--rounds", "1"]) == 3
    ((argv, env),) = started
    assert argv[1:] == ["-m", "bench.backend_throughput", "--rounds", "1"]
    assert env[TRACE_HOPS] == str(tmp_path / "hops")


def test_the_report_splits_the_streams_time(tmp_path):
    """Two streams over 1 s, one request each: 100 ms from execute() to vLLM, 700 ms inside, 50 ms to send the final;
    the rest (150 ms) is outside the stub."""
    ms = 1_000_000
    lines = [
        f"R triton_http:2:1 {0}",
        f"R triton_http:2:1 {1000 * ms}",
        f"R raw:2:1 {2000 * ms}",
        f"R raw:2:1 {3000 * ms}",
    ]
    for request in ("a", "b"):
        for tag, at in (("X", 10), ("A", 40), ("E", 110), ("O", 300), ("S", 320), ("O", 810), ("F", 860)):
            lines.append(f"{tag} {request} {at * ms}")
    hops = tmp_path / "hops"
    hops.mkdir()
    (hops / "hops.1").write_text("\n".join(lines) + "\n")
    (row,) = load_tool().report(str(hops), None)  # raw's measurement has no stub events: no row
    assert row["requests"] == 2 and row["streams"] == 2
    assert row["share_of_stream_time"] == {
        "inside_vllm": 0.7,
        "stub_before_vllm": 0.1,
        "stub_after_vllm": 0.05,
        "outside_the_stub": 0.15,
    }
    assert row["ms"]["admitted_to_vllm"]["median"] == 70
    assert row["ms"]["first_output_to_sent"]["median"] == 20
    assert row["responses_per_request"] == 2
    assert "final_output_to_held" not in row["ms"]  # no final was held for its stats


def test_the_report_splits_a_held_final_into_its_queues_and_its_stats_wait(tmp_path, capsys):
    """ENGINE_PROCESS with metrics: the final output at 810 ms reached the send thread at 830, was let go after the
    report at 845 and sent at 860."""
    ms = 1_000_000
    lines = [f"R triton_http:1:1 {0}", f"R triton_http:1:1 {1000 * ms}"]
    events = (("X", 10), ("A", 40), ("E", 110), ("O", 300), ("S", 320), ("O", 810), ("H", 830), ("L", 845), ("F", 860))
    lines += [f"{tag} a {at * ms}" for tag, at in events]
    hops = tmp_path / "hops"
    hops.mkdir()
    (hops / "hops.1").write_text("\n".join(lines) + "\n")
    (row,) = load_tool().report(str(hops), None)
    assert row["ms"]["final_output_to_sent"]["median"] == 50
    assert row["ms"]["final_output_to_held"]["median"] == 20
    assert row["ms"]["final_held_to_released"]["median"] == 15
    assert row["ms"]["final_released_to_sent"]["median"] == 15
    assert "final: queued/stats/queued 20.0/15.0/15.0 ms" in capsys.readouterr().out


def test_the_report_splits_engine_process_hops_each_side_of_vllm(tmp_path, capsys):
    """ENGINE_PROCESS: admitted at 40 ms, its task started at 55 and the prompt tokenized by 110; the first output
    left vLLM at 300, the stub read it at 304, the send thread reached it at 312 and sent it at 320."""
    ms = 1_000_000
    lines = [f"R triton_http:1:1 {0}", f"R triton_http:1:1 {1000 * ms}"]
    events = (("X", 10), ("A", 40), ("P", 55), ("E", 110), ("O", 300), ("V", 304), ("W", 312), ("S", 320))
    lines += [f"{tag} a {at * ms}" for tag, at in (*events, ("O", 810), ("F", 860))]
    hops = tmp_path / "hops"
    hops.mkdir()
    (hops / "hops.1").write_text("\n".join(lines) + "\n")
    (row,) = load_tool().report(str(hops), None)
    names = ("admitted_to_task", "tokenizing", "first_output_to_read", "read_to_send_thread", "send_thread_to_sent")
    assert [row["ms"][name]["median"] for name in names] == [15, 55, 4, 8, 8]
    shown = capsys.readouterr().out
    assert "in: to task/tokenize 15.00/55.00  first out: read/send thread/sent 4.00/8.00/8.00 ms" in shown


def test_without_the_engine_process_hops_the_report_has_no_rows_for_them(tmp_path):
    ms = 1_000_000
    lines = [f"R triton_http:1:1 {0}", f"R triton_http:1:1 {1000 * ms}"]
    lines += [f"{tag} a {at * ms}" for tag, at in (("X", 10), ("A", 40), ("E", 110), ("O", 300), ("F", 320))]
    hops = tmp_path / "hops"
    hops.mkdir()
    (hops / "hops.1").write_text("\n".join(lines) + "\n")
    (row,) = load_tool().report(str(hops), None)
    assert not {"admitted_to_task", "tokenizing", "first_output_to_read"} & row["ms"].keys()
