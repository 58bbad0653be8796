"""How vLLM's metrics reach Triton, without Triton: the series a report writes, how many calls it makes (each is a
round trip to the server), and how far apart reports are. A stand-in for the stub's MetricFamily counts the calls and
renders the series as Prometheus would read them."""

from __future__ import annotations

import math
import threading
import time
from types import SimpleNamespace
from typing import ClassVar

import pytest

from vllm_repo.backend.vllm_repo_backend import metrics, metrics_report, stub

LABELS = {"model": "m", "version": "1"}


class FakeFamily:
    """The stub's pb_utils.MetricFamily: each metric call recorded, the values kept by family and labels."""

    COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"
    calls: ClassVar[list[tuple[str, str]]] = []
    series: ClassVar[dict[tuple[str, tuple], float]] = {}
    kinds: ClassVar[dict[str, str]] = {}
    delay_s = 0.0

    def __init__(self, name: str, description: str, kind: str) -> None:
        self.name, self.kind = name, kind
        FakeFamily.kinds[name] = kind

    def Metric(self, labels: dict, buckets: list | None = None) -> FakeMetric:  # the stub's name
        return FakeMetric(self, labels, buckets)


class FakeMetric:
    def __init__(self, family: FakeFamily, labels: dict, buckets: list | None) -> None:
        self.family, self.key, self.buckets = family, tuple(sorted(labels.items())), buckets

    def _call(self, op: str) -> None:
        FakeFamily.calls.append((op, self.family.name))
        if FakeFamily.delay_s:
            time.sleep(FakeFamily.delay_s)

    def increment(self, value: float) -> None:
        self._call("increment")
        key = (self.family.name, self.key)
        FakeFamily.series[key] = FakeFamily.series.get(key, 0.0) + value

    def set(self, value: float) -> None:
        self._call("set")
        FakeFamily.series[(self.family.name, self.key)] = value

    def observe(self, value: float) -> None:
        self._call("observe")
        name = self.family.name
        for bound in [*self.buckets, math.inf]:
            if value <= bound:
                le = "+Inf" if bound == math.inf else f"{bound:.16g}"
                key = (f"{name}_bucket", tuple(sorted([*self.key, ("le", le)])))
                FakeFamily.series[key] = FakeFamily.series.get(key, 0.0) + 1
        for suffix, added in (("_sum", value), ("_count", 1)):
            key = (name + suffix, self.key)
            FakeFamily.series[key] = FakeFamily.series.get(key, 0.0) + added


@pytest.fixture
def fake_stub(monkeypatch):
    FakeFamily.calls, FakeFamily.series, FakeFamily.kinds, FakeFamily.delay_s = [], {}, {}, 0.0
    logger = SimpleNamespace(log_info=print, log_warn=print, log_error=print, log_verbose=print)
    monkeypatch.setattr(stub, "pb_utils", SimpleNamespace(MetricFamily=FakeFamily, Logger=logger))
    return FakeFamily


def _iteration(ttft=(), itl=(), finished=()):
    return SimpleNamespace(
        num_prompt_tokens=7 * len(ttft),
        num_generation_tokens=len(ttft) + len(itl),
        num_preempted_reqs=0,
        time_to_first_tokens_iter=list(ttft),
        inter_token_latencies_iter=list(itl),
        n_params_iter=[1] * len(finished),
        finished_requests=list(finished),
    )


def _finished(request_id: str, tokens: int):
    return SimpleNamespace(
        finish_reason="length",
        request_id=request_id,
        e2e_latency=1.5,
        queued_time=0.02,
        num_prompt_tokens=7,
        num_generation_tokens=tokens,
    )


def _record_requests(acc: metrics.MetricsAccumulator, requests: int, tokens: int) -> None:
    """``requests`` requests of ``tokens`` tokens each, stepped together as vLLM's engine steps a batch."""
    acc.record(SimpleNamespace(num_running_reqs=requests, num_waiting_reqs=0, kv_cache_usage=0.5), None)
    acc.record(None, _iteration(ttft=[0.03 + 0.001 * i for i in range(requests)]))
    for step in range(tokens - 1):
        acc.record(None, _iteration(itl=[0.004 + 0.02 * (step % 7)] * requests))
    acc.record(None, _iteration(finished=[_finished(f"r{i}", tokens) for i in range(requests)]))


def _reported(metrics_obj: metrics_report.TritonMetrics) -> dict[tuple[str, tuple], float]:
    metrics_obj._stop.set()
    metrics_obj._acc.wake.set()
    metrics_obj._thread.join(timeout=5)
    metrics_obj.flush()
    return dict(FakeFamily.series)


def test_histogram_counts_follow_prometheus_bucket_rule_and_fold_into_a_prefix_of_their_grid():
    grid = tuple(metrics.token_buckets(10**6))
    counts = metrics.HistogramCounts.empty(grid, keep_values=False)
    counts.add([1, 2, 3, 5, 6, 500, 501, 10**6, 10**6 + 1])
    # A value equal to a bound is in that bound's bucket; above the grid, in +Inf.
    assert counts.cumulative([1.0, 2.0, 5.0, 500.0]) == [1, 2, 4, 6, 9]
    assert counts.cumulative(metrics.token_buckets(512)) == [1, 2, 4, 5, 5, 5, 5, 5, 6, 9]
    other = metrics.HistogramCounts.empty(grid, keep_values=False)
    other.add([2])
    counts.merge(other)
    assert counts.cumulative([2.0]) == [3, 10] and counts.total == sum([1, 2, 3, 5, 6, 500, 501, 10**6, 10**6 + 1, 2])


def test_counted_histograms_write_the_series_per_value_observations_would(fake_stub):
    """The default's series (counters) hold what Triton's histogram metrics hold after one observe() per value."""
    results = {}
    for per_value in (False, True):
        FakeFamily.series, FakeFamily.kinds = {}, {}
        acc = metrics.MetricsAccumulator(keep_values=per_value)
        reporter = metrics_report.TritonMetrics(LABELS, 4096, acc, per_value_histograms=per_value)
        _record_requests(acc, requests=5, tokens=12)
        results[per_value] = _reported(reporter)
        kinds = dict(FakeFamily.kinds)
    counted, observed = results[False], results[True]
    assert counted.keys() == observed.keys()
    for key, value in observed.items():
        assert math.isclose(counted[key], value), key
    assert counted[("vllm:time_per_output_token_seconds_count", tuple(sorted(LABELS.items())))] == 5 * 11
    assert kinds["vllm:time_per_output_token_seconds"] == "histogram"  # REPORT_HISTOGRAMS_PER_VALUE's families


def test_a_report_costs_a_bounded_number_of_calls_whatever_the_tokens_and_requests(fake_stub):
    def calls_for(requests: int, tokens: int, per_value: bool) -> int:
        FakeFamily.calls = []
        acc = metrics.MetricsAccumulator(keep_values=per_value)
        reporter = metrics_report.TritonMetrics(LABELS, 4096, acc, per_value_histograms=per_value)
        reporter._stop.set()
        reporter._thread.join(timeout=5)
        FakeFamily.calls = []
        _record_requests(acc, requests, tokens)
        reporter.flush()
        return len(FakeFamily.calls)

    series = sum(len(grid) + 3 for grid in metrics.HISTOGRAM_GRIDS.values()) + 3 + 3 + 1
    # One call per changed series at most, for 2 requests of 8 tokens as for 200 of 256.
    assert calls_for(2, 8, False) <= series and calls_for(200, 256, False) <= series
    # One observe per value with REPORT_HISTOGRAMS_PER_VALUE: at least one call per token after each first.
    assert calls_for(200, 256, True) > 200 * 255


def test_finals_that_come_during_a_report_go_out_together_after_the_next(fake_stub):
    """Reports never overlap: the final responses whose stats come in while one is under way wait for the next,
    which holds all of them, so the reports are fewer than the finals however fast they come; every final goes."""
    FakeFamily.delay_s = 0.02  # each call's round trip: a report takes about half a second
    acc = metrics.MetricsAccumulator()
    reporter = metrics_report.TritonMetrics(LABELS, 4096, acc)
    sent = threading.Semaphore(0)
    for i in range(6):
        acc.expect(f"r{i}", 1)
        _record_requests_one(acc, f"r{i}")
        acc.send_final_after_stats(f"r{i}", sent.release)
        time.sleep(0.01)
    for _ in range(6):
        assert sent.acquire(timeout=30)
    assert 1 <= reporter.reports < 6
    reporter.stop()


def test_a_report_sets_the_gauges_after_the_counts_they_go_with(fake_stub):
    """A scrape between two calls of one report that reads no request running then reads all their tokens: the
    gauges are set after the counters and histograms of the same report."""
    acc = metrics.MetricsAccumulator()
    reporter = metrics_report.TritonMetrics(LABELS, 4096, acc)
    reporter._stop.set()
    reporter._thread.join(timeout=5)
    _record_requests(acc, requests=3, tokens=4)  # its gauges: 3 running, from 0 at the thread's last report
    FakeFamily.calls = []
    reporter.flush()
    ops = [op for op, _ in FakeFamily.calls]
    assert ops.count("set") == 3 and "increment" in ops
    assert ops.index("set") > max(i for i, op in enumerate(ops) if op != "set"), FakeFamily.calls


def _record_requests_one(acc: metrics.MetricsAccumulator, request_id: str) -> None:
    acc.record(None, _iteration(ttft=[0.03], itl=[0.01] * 4, finished=[_finished(request_id, 5)]))


def test_bucket_labels_are_written_as_triton_writes_its_histograms():
    assert [metrics_report._bound_label(b) for b in (0.001, 0.025, 0.075, 1.0, 2.5, 10.0, math.inf)] == [
        "0.001",
        "0.025",
        "0.075",
        "1",
        "2.5",
        "10",
        "+Inf",
    ]
