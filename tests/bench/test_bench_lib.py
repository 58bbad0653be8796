"""bench/lib: the rounds' order and ratios, the result files and the CPU accounting the benchmarks share."""

from __future__ import annotations

import json
import os
import time

import pytest

from bench.lib import processes
from bench.lib.results import ResultFile
from bench.lib.rounds import field_medians, per_round_ratios, round_order, spread


def test_two_paths_alternate_and_more_turn_one_place_a_round():
    assert [round_order(["a", "b"], i) for i in range(3)] == [["a", "b"], ["b", "a"], ["a", "b"]]
    assert round_order(["a", "b", "c"], 1) == ["b", "c", "a"]
    assert round_order(["a", "b"], -1) == ["b", "a"]  # a warm-up round
    assert round_order([], 3) == []


def test_ratios_are_per_round_with_their_median_and_range():
    runs = [{"tokens_per_s": 90.0}, {"tokens_per_s": 100.0}, {"tokens_per_s": 80.0}]
    raw = [{"tokens_per_s": 100.0}, {"tokens_per_s": 100.0}, {"tokens_per_s": 100.0}]
    ratios = per_round_ratios(runs, raw, "tokens_per_s")
    assert ratios.per_round == [0.9, 1.0, 0.8]
    assert (ratios.median, ratios.low, ratios.high) == (0.9, 0.8, 1.0)


def test_a_path_measured_in_the_first_rounds_only_meets_the_baselines_same_rounds():
    ratios = per_round_ratios([{"v": 50.0}], [{"v": 100.0}, {"v": 10.0}], "v")
    assert ratios.per_round == [0.5]


def test_medians_leave_out_a_field_some_run_lacks():
    runs = [{"a": 1, "b": None}, {"a": 3, "b": 2}, {"a": 2}]
    assert field_medians(runs, ("a", "b", "c")) == {"a": 2}


def test_a_result_file_is_named_after_the_benchmark_and_its_start_and_a_partial_one_beside_it(tmp_path):
    result_file = ResultFile(tmp_path / "out", "backend_throughput_cpu")
    partial = result_file.write_partial({"complete_rounds": 1})
    final = result_file.write({"summary": {}})
    assert partial.name == f"backend_throughput_cpu_{result_file.started}.partial.json"
    assert final.name == f"backend_throughput_cpu_{result_file.started}.json"
    assert json.loads(partial.read_text()) == {"complete_rounds": 1}
    assert json.loads(final.read_text()) == {"summary": {}}
    assert len(result_file.started) == len("20261206T071500") and result_file.started[8] == "T"


def test_a_result_file_can_be_written_as_the_launch_benchmarks_write_theirs(tmp_path):
    path = ResultFile(tmp_path, "launch_cycle", indent=2, newline=True).write({"a": 1})
    assert path.read_text() == '{\n  "a": 1\n}\n'


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_cpu_seconds_count_what_this_process_used_between_two_readings():
    before = processes.cpu_seconds_by_process()
    _spin(0.3)
    after = processes.cpu_seconds_by_process()
    used = processes.cpu_seconds_of(before, after, [os.getpid()])
    assert used == pytest.approx(0.3, abs=0.15)
    by_label = processes.cpu_used(before, after, {os.getpid(): "this test"})
    assert by_label["this test"] == pytest.approx(used, abs=0.001)


def test_thread_cpu_seconds_name_this_process_threads_and_the_busiest_is_this_one():
    before = processes.thread_cpu_seconds([os.getpid()])
    _spin(0.3)
    after = processes.thread_cpu_seconds([os.getpid()])
    busiest = processes.busiest_threads(before, after, wall=1.0, top=1)
    ((name, per_second),) = busiest.items()
    assert name.startswith(f"{os.getpid()}/")
    assert per_second == pytest.approx(0.3, abs=0.15)


def test_children_of_finds_every_process_below(tmp_path):
    import subprocess
    import sys

    script = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import time; time.sleep(30)'])"
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 10
        while len(processes.children_of(os.getpid())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        below = processes.children_of(os.getpid())
        assert child.pid in below and len(below) >= 2
    finally:
        for pid in reversed(processes.children_of(child.pid)):
            os.kill(pid, 9)
        child.kill()
        child.wait()


def test_every_model_of_a_backend_run_takes_the_models_parameters_and_a_variant_changes_only_what_it_names():
    from bench.backend_throughput import served_parameters

    served = served_parameters(
        True, {"ENGINE_PROCESS": "true"}, {"stub": {"ENGINE_PROCESS": "false"}}, ["one_thread=/tmp/before"]
    )
    assert served[""] == {"REPORT_CUSTOM_METRICS": "true", "ENGINE_PROCESS": "true"}  # as init writes, and what's given
    assert served["stub"] == {"REPORT_CUSTOM_METRICS": "true", "ENGINE_PROCESS": "false"}
    # The other backend runs with the model's settings (it ran without --parameters: the stub's shape on the CPU).
    assert served["one_thread"] == served[""]
    assert served_parameters(False, {}, {}, []) == {"": {}}  # --metrics off: not asked for


def test_a_spread_is_how_far_the_rounds_moved_over_their_median():
    assert spread([{"v": 90.0}, {"v": 110.0}, {"v": 100.0}], "v") == 0.2
    assert spread([{"v": 100.0}, {"v": 100.0}], "v") == 0.0


def test_the_summary_names_the_load_points_where_raw_did_not_hold_its_pace():
    from bench.backend_throughput import summarize, unsteady_baseline

    def runs(*tokens_per_s: float) -> list[dict]:
        return [{"tokens_per_s": t, "ttft_median_ms": 10.0} for t in tokens_per_s]

    summary = summarize(
        {
            "c32": {"raw": runs(100, 101, 99), "triton_http": runs(98, 99, 97)},
            "c512": {"raw": runs(100, 130, 110), "triton_http": runs(100, 100, 100)},
        }
    )
    assert summary["c32"]["raw_spread"] == 0.02 and summary["c512"]["raw_spread"] == 0.273
    assert summary["c512"]["triton_http_over_raw_per_round"] == [1.0, 0.769, 0.909]
    line = unsteady_baseline(summary)
    assert "c512 (0.27)" in line and "c32" not in line
    assert "every load point" in unsteady_baseline({"c32": summary["c32"]})
