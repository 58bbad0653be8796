"""vLLM's metrics reported to Triton (REPORT_CUSTOM_METRICS): the metric families, and the thread that reports what
the accumulator (metrics.py) summed and then sends the final responses that waited for it.

Each Triton metric call from the stub is a round trip to the server, answered by one server thread (the one that also
answers cancellation checks, log lines and the release of finished requests), so the reporting is bounded: a report
makes one call per series that changed (a counter's increment, a gauge's new value, a histogram's changed buckets,
sum and count: its series as counters, ``CountedHistogram``), however many values came in, and reports follow one
another, never overlapping: what comes in while one is under way goes in the next. A final response waits for the
report that holds its request's stats, so that report starts at once: every millisecond a final waits is one its
stream's client does not send its next request.
``REPORT_HISTOGRAMS_PER_VALUE "true"`` makes the histograms Triton histogram metrics instead, one call per value
(``ObservedHistogram``: the ``# TYPE ... histogram`` line of Triton's own vLLM backend, for collectors that read it,
at a cost that grows with the tokens per second).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from . import log, stub
from .metrics import (
    E2E_BUCKETS,
    FINAL_RESPONSE_HOLD_LIMIT_S,
    METRICS_FLUSH_INTERVAL_S,
    N_PARAM_BUCKETS,
    QUEUE_BUCKETS,
    TPOT_BUCKETS,
    TTFT_BUCKETS,
    HistogramCounts,
    MetricsAccumulator,
    token_buckets,
)


class HistogramSeries(Protocol):
    def report(self, counts: HistogramCounts) -> int:
        """Hand what was recorded to Triton; how many calls that took."""


class ObservedHistogram:
    """A Triton histogram metric: one observe() per value, as Triton's own vLLM backend reports them."""

    def __init__(self, family: Any, metric: Any) -> None:
        self._family, self._metric = family, metric

    def report(self, counts: HistogramCounts) -> int:
        values = counts.values or ()
        for value in values:
            self._metric.observe(value)
        return len(values)


class CountedHistogram:
    """A Prometheus histogram's series (``_bucket`` per bound and +Inf, ``_sum``, ``_count``, labelled as Triton's
    histogram metrics are) kept as counters: each report adds what changed, one call per changed series."""

    def __init__(self, make_family: Any, name: str, description: str, bounds: Sequence[float], labels: dict) -> None:
        family = stub.pb_utils.MetricFamily
        self.bounds = list(bounds)
        self._bucket_family = make_family(f"{name}_bucket", description, family.COUNTER)
        self._buckets = [
            self._bucket_family.Metric(labels={**labels, "le": _bound_label(bound)})
            for bound in [*self.bounds, float("inf")]
        ]
        self._sum = make_family(f"{name}_sum", description, family.COUNTER).Metric(labels=labels)
        self._count = make_family(f"{name}_count", description, family.COUNTER).Metric(labels=labels)

    def report(self, counts: HistogramCounts) -> int:
        cumulative = counts.cumulative(self.bounds)
        if not cumulative[-1]:
            return 0
        calls = 0
        for metric, added in zip(self._buckets, cumulative, strict=True):
            if added:
                metric.increment(added)
                calls += 1
        self._sum.increment(counts.total)
        self._count.increment(cumulative[-1])
        return calls + 2


def _bound_label(bound: float) -> str:
    """A bucket's le label as Triton (prometheus-cpp, "%.16g") writes its histogram metrics' ("1", "0.025", "+Inf")."""
    return "+Inf" if bound == float("inf") else f"{bound:.16g}"


class TritonMetrics:
    """vLLM's metric families on Triton's metrics endpoint (labels: model, version), and the thread that reports
    them and sends the final responses that waited for them."""

    def __init__(
        self,
        labels: Mapping[str, str],
        max_model_len: int,
        accumulator: MetricsAccumulator,
        per_value_histograms: bool = False,
    ) -> None:
        family = stub.pb_utils.MetricFamily
        self._acc = accumulator
        self._labels = dict(labels)
        self._reason_counters: dict[str, Any] = {}
        self.reports = 0
        self.calls = 0  # round trips to the server, for the log line at unload
        self.reporting_s = 0.0
        self.longest_report_s = 0.0

        # Triton deletes a family's metrics with the family object: keep every family alive as long as the model.
        self._families: list[Any] = []

        def make_family(name: str, description: str, kind: Any) -> Any:
            fam = family(name=name, description=description, kind=kind)
            self._families.append(fam)
            return fam

        def metric(name: str, description: str, kind: Any) -> Any:
            return make_family(name, description, kind).Metric(labels=self._labels)

        def histogram(name: str, description: str, buckets: Sequence[float]) -> HistogramSeries:
            if per_value_histograms:
                fam = make_family(name, description, family.HISTOGRAM)
                return ObservedHistogram(fam, fam.Metric(labels=self._labels, buckets=list(buckets)))
            return CountedHistogram(make_family, name, description, buckets, self._labels)

        # The families Triton's own vLLM backend exports.
        self.prompt_tokens = metric("vllm:prompt_tokens_total", "Number of prefill tokens processed.", family.COUNTER)
        self.generation_tokens = metric(
            "vllm:generation_tokens_total", "Number of generation tokens processed.", family.COUNTER
        )
        tokens = token_buckets(max_model_len)
        self.histograms: dict[str, HistogramSeries] = {
            "ttft": histogram(
                "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
            ),
            "tpot": histogram(
                "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", TPOT_BUCKETS
            ),
            "e2e": histogram(
                "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", E2E_BUCKETS
            ),
            "request_prompt_tokens": histogram(
                "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
            ),
            "request_generation_tokens": histogram(
                "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
            ),
            "request_params_n": histogram(
                "vllm:request_params_n", "Histogram of the n request parameter.", N_PARAM_BUCKETS
            ),
            # This backend's additions.
            "queue": histogram(
                "vllm:request_queue_time_seconds", "Histogram of time spent waiting in the queue.", QUEUE_BUCKETS
            ),
        }
        self._success_family = make_family(
            "vllm:request_success_total", "Number of finished requests, by finish reason.", family.COUNTER
        )
        self.preemptions = metric(
            "vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.", family.COUNTER
        )
        self.running = metric(
            "vllm:num_requests_running", "Number of requests in model execution batches.", family.GAUGE
        )
        self.waiting = metric("vllm:num_requests_waiting", "Number of requests waiting to be processed.", family.GAUGE)
        self.kv_cache_usage = metric(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", family.GAUGE
        )
        self._last_gauges: tuple | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            # Woken at once by a final response that waits for its stats; otherwise a periodic report.
            self._acc.wake.wait(METRICS_FLUSH_INTERVAL_S)
            if self._acc.release_held(FINAL_RESPONSE_HOLD_LIMIT_S):
                log.warn("[vllm] final responses went out without their request's stats (none came)")
            self.flush()
        self._acc.release_held()
        self.flush()

    def flush(self) -> None:
        started = time.monotonic()
        s = self._acc.take()
        calls = 0
        try:
            for metric, added in (
                (self.prompt_tokens, s["prompt_tokens"]),
                (self.generation_tokens, s["generation_tokens"]),
                (self.preemptions, s["preemptions"]),
            ):
                if added:
                    metric.increment(added)
                    calls += 1
            for reason, count in s["finished_by_reason"].items():
                counter = self._reason_counters.get(reason)
                if counter is None:
                    counter = self._success_family.Metric(labels={**self._labels, "finished_reason": reason})
                    self._reason_counters[reason] = counter
                counter.increment(count)
                calls += 1
            for name, series in self.histograms.items():
                calls += series.report(s["histograms"][name])
            # The gauges last: a scrape that reads the engine idle then reads every token and request counted.
            gauges = (s["running"], s["waiting"], s["kv_cache_usage"])
            if gauges != self._last_gauges:  # each set() is a round trip to the server: only on change
                self.running.set(gauges[0])
                self.waiting.set(gauges[1])
                self.kv_cache_usage.set(gauges[2])
                self._last_gauges = gauges
                calls += 3
        except Exception:  # metrics must never take the model down
            log.error(f"[vllm] reporting metrics failed: {traceback.format_exc()}")
        if calls:
            spent = time.monotonic() - started
            self.reports += 1
            self.calls += calls
            self.reporting_s += spent
            self.longest_report_s = max(self.longest_report_s, spent)
        for send in s["ready_finals"]:
            send()

    def stop(self) -> None:
        self._stop.set()
        self._acc.wake.set()
        self._thread.join(timeout=5)
        if self._thread.is_alive():
            return
        log.info(
            f"[vllm] metrics: {self.reports} reports, {self.calls} metric calls to the server, "
            f"{self.reporting_s:.2f} s reporting (longest {self.longest_report_s * 1000:.1f} ms)"
        )
        # The metrics and their families go now, while the stub runs: a family deletes its metrics through the stub's
        # shared memory, and left to the interpreter's exit (where a traceback kept this object) that came after the
        # stub had let go of it, a SIGSEGV in Metric::Clear that held the model's unload up by about a second.
        families = self._families
        for name, value in list(vars(self).items()):
            if name != "_families" and not isinstance(value, (threading.Thread, threading.Event, MetricsAccumulator)):
                setattr(self, name, None)
        self._reason_counters = {}
        self._families = []
        families.clear()
