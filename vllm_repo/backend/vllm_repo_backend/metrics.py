"""vLLM's metrics on Triton's metrics endpoint (config.pbtxt's REPORT_CUSTOM_METRICS): vLLM's per-iteration stats
collected where the engine runs, summed per bucket there, and handed to a reporter (metrics_report.py) that sends them
to Triton and then the final responses that wait for them.

The families, names, labels and buckets are those of Triton's own vLLM backend, so that dashboards and alerts built
on it read the same series, plus a few of this backend's own (the engine's load and KV cache).
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .configuration import bool_parameter
from .errors import BackendConfigError, RequestError
from .native import parse_bool

# How often what vLLM recorded is reported when no final response asks for it sooner (the gauges, a long prefill).
METRICS_FLUSH_INTERVAL_S = 0.05

# Bucket boundaries of the families Triton's own vLLM backend exports, so that dashboards and alerts built on it
# read the same series. The queue-time histogram is this backend's own.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
N_PARAM_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
QUEUE_BUCKETS = (0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0)
# Token counts are summed on the widest 1-2-5 grid where they are recorded (ENGINE_PROCESS records before the engine,
# and so max_model_len, is known); the reporter folds it into the family's buckets, a prefix of it.
TOKEN_GRID_LIMIT = 10**9

# A final response held back for its request's stats is sent anyway after this long (the stats never came: vLLM
# records them in the same step that delivers the output, so this only guards against a stuck engine).
FINAL_RESPONSE_HOLD_LIMIT_S = 5.0


def token_buckets(max_model_len: int) -> list[float]:
    """1, 2, 5, 10, 20, 50, ... up to max_model_len."""
    buckets: list[float] = []
    base = 1
    while True:
        for m in (1, 2, 5):
            value = m * base
            if value > max_model_len:
                return buckets
            buckets.append(float(value))
        base *= 10


def metrics_enabled(params: Mapping[str, str], engine_config: Mapping[str, Any]) -> bool:
    """vLLM's metrics are reported when config.pbtxt says REPORT_CUSTOM_METRICS "true" and model.json does not
    turn vLLM's stats off with ``"disable_log_stats": true`` (as with Triton's own vLLM backend)."""
    if not bool_parameter(params, "REPORT_CUSTOM_METRICS"):
        return False
    try:
        return not parse_bool(engine_config.get("disable_log_stats") or False, "disable_log_stats")
    except RequestError as exc:
        raise BackendConfigError(f"model.json: {exc}") from None


# The histograms, by the accumulator's name for each: the bucket grid their values are summed on.
HISTOGRAM_GRIDS: dict[str, tuple[float, ...]] = {
    "ttft": TTFT_BUCKETS,
    "tpot": TPOT_BUCKETS,
    "e2e": E2E_BUCKETS,
    "queue": QUEUE_BUCKETS,
    "request_prompt_tokens": tuple(token_buckets(TOKEN_GRID_LIMIT)),
    "request_generation_tokens": tuple(token_buckets(TOKEN_GRID_LIMIT)),
    "request_params_n": N_PARAM_BUCKETS,
}
HISTOGRAMS = tuple(HISTOGRAM_GRIDS)


@dataclass
class HistogramCounts:
    """The values one histogram recorded since the last take(): how many fell in each bucket of its grid (the last
    count is the +Inf bucket's), their sum, and the values themselves where they are reported one by one."""

    grid: tuple[float, ...]
    counts: list[int]
    total: float = 0.0
    values: list[float] | None = None

    @classmethod
    def empty(cls, grid: tuple[float, ...], keep_values: bool) -> HistogramCounts:
        return cls(grid, [0] * (len(grid) + 1), 0.0, [] if keep_values else None)

    @property
    def count(self) -> int:
        return sum(self.counts)

    def add(self, values: Sequence[float]) -> None:
        for value in values:
            value = float(value)
            # Prometheus' rule: a value belongs to the first bucket whose upper bound is at least the value.
            self.counts[bisect.bisect_left(self.grid, value)] += 1
            self.total += value
        if self.values is not None:
            self.values.extend(float(v) for v in values)

    def merge(self, other: HistogramCounts) -> None:
        for index, count in enumerate(other.counts):
            self.counts[index] += count
        self.total += other.total
        if self.values is not None and other.values is not None:
            self.values.extend(other.values)

    def cumulative(self, bounds: Sequence[float]) -> list[int]:
        """The count at or below each of ``bounds`` (each one of the grid's), then the count of all (+Inf)."""
        found, running, index = [], 0, 0
        for bound in bounds:
            while index < len(self.grid) and self.grid[index] <= bound:
                running += self.counts[index]
                index += 1
            found.append(running)
        found.append(self.count)
        return found


class MetricsAccumulator:
    """Collects vLLM's per-iteration stats where the engine runs (cheap: no IPC there), summed per bucket, for a
    reporter thread that hands them to Triton. Every Triton metric call is a round trip to the server, so what is
    reported costs a bounded number of calls per report, whatever the tokens or requests per second (metrics_report.py);
    only with ``keep_values`` (Triton histogram metrics, one call per value) are the values themselves kept.

    It also holds each request's final response until that request's stats are recorded; the reporter reports them
    before it sends the response, so a client that scrapes the metrics port right after its answer sees its request
    counted. Requests are tracked by vLLM request id, from ``expect()`` to ``forget()``, all on the engine loop.
    """

    def __init__(self, keep_values: bool = False) -> None:
        self._lock = threading.Lock()
        self.keep_values = keep_values
        self._reset()
        self.running = 0
        self.waiting = 0
        self.kv_cache_usage = 0.0
        self._gauges_taken: tuple | None = None  # the gauges as the last take() had them
        # request id -> [completions not yet recorded as finished, held final send or None, when it was held]
        self._tracked: dict[str, list[Any]] = {}
        self.wake = threading.Event()  # set when a final response is ready to go out

    def _reset(self) -> None:
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.finished_by_reason: dict[str, int] = {}
        self.histograms = {
            name: HistogramCounts.empty(grid, self.keep_values) for name, grid in HISTOGRAM_GRIDS.items()
        }
        self.finished_ids: list[Any] = []  # vLLM's request id of each finished request recorded (None: it has none)
        self.ready_finals: list[Any] = []

    def record(self, scheduler_stats: Any, iteration_stats: Any) -> None:
        with self._lock:
            if scheduler_stats is not None:
                self.running = getattr(scheduler_stats, "num_running_reqs", 0)
                self.waiting = getattr(scheduler_stats, "num_waiting_reqs", 0)
                usage = getattr(scheduler_stats, "kv_cache_usage", None)
                if usage is None:
                    usage = getattr(scheduler_stats, "gpu_cache_usage", 0.0)
                self.kv_cache_usage = float(usage or 0.0)
            if iteration_stats is None:
                return
            self.prompt_tokens += int(getattr(iteration_stats, "num_prompt_tokens", 0) or 0)
            self.generation_tokens += int(getattr(iteration_stats, "num_generation_tokens", 0) or 0)
            self.preemptions += int(getattr(iteration_stats, "num_preempted_reqs", 0) or 0)
            histograms = self.histograms
            histograms["ttft"].add(getattr(iteration_stats, "time_to_first_tokens_iter", ()) or ())
            # One sample per generated token after a request's first, as vLLM measures it (inter-token latency).
            histograms["tpot"].add(getattr(iteration_stats, "inter_token_latencies_iter", ()) or ())
            histograms["request_params_n"].add(getattr(iteration_stats, "n_params_iter", ()) or ())
            for finished in getattr(iteration_stats, "finished_requests", ()) or ():
                reason = str(getattr(finished, "finish_reason", "unknown")).lower()
                self.finished_by_reason[reason] = self.finished_by_reason.get(reason, 0) + 1
                histograms["e2e"].add((finished.e2e_latency,))
                histograms["queue"].add((getattr(finished, "queued_time", 0.0),))
                histograms["request_prompt_tokens"].add((finished.num_prompt_tokens,))
                histograms["request_generation_tokens"].add((finished.num_generation_tokens,))
                request_id: Any = getattr(finished, "request_id", None)  # vLLM's object: None where it has no id
                self.finished_ids.append(request_id)
                self._recorded(request_id)

    def _recorded(self, request_id: Any) -> None:
        """A finished request's stats are in: its final response may go once they are reported."""
        tracked = self._tracked.get(request_id)
        if tracked is not None:
            tracked[0] -= 1
            if tracked[0] <= 0 and tracked[1] is not None:
                self._release(request_id)

    def merge(self, taken: Mapping[str, Any]) -> None:
        """Add what another process's accumulator recorded (its take(), less its final sends): ENGINE_PROCESS records
        vLLM's stats where the engine runs and reports them from the stub, which alone can reach Triton's metrics."""
        with self._lock:
            self.running, self.waiting = taken["running"], taken["waiting"]
            self.kv_cache_usage = taken["kv_cache_usage"]
            self.prompt_tokens += taken["prompt_tokens"]
            self.generation_tokens += taken["generation_tokens"]
            self.preemptions += taken["preemptions"]
            for reason, count in taken["finished_by_reason"].items():
                self.finished_by_reason[reason] = self.finished_by_reason.get(reason, 0) + count
            for name, counts in taken["histograms"].items():
                self.histograms[name].merge(counts)
            for request_id in taken["finished_ids"]:
                self.finished_ids.append(request_id)
                self._recorded(request_id)

    def expect(self, request_id: str, completions: int) -> None:
        """A request is starting; its final response waits for ``completions`` finished-request stats."""
        with self._lock:
            self._tracked[request_id] = [max(completions, 1), None, 0.0]

    def send_final_after_stats(self, request_id: str, send: Any) -> None:
        """Have the flusher call ``send()`` once the request's stats are recorded and reported."""
        with self._lock:
            tracked = self._tracked.get(request_id)
            if tracked is None or tracked[0] <= 0:
                self._tracked.pop(request_id, None)
                self.ready_finals.append(send)
                self.wake.set()
            else:
                tracked[1], tracked[2] = send, time.monotonic()

    def forget(self, request_id: str) -> None:
        """The request's task is done; a final response still held stays until its stats come."""
        with self._lock:
            tracked = self._tracked.get(request_id)
            if tracked is not None and tracked[1] is None:
                del self._tracked[request_id]

    def release_held(self, older_than_s: float = 0.0) -> int:
        """Let final responses held longer than ``older_than_s`` go without their stats; how many."""
        with self._lock:
            now = time.monotonic()
            stale = [rid for rid, t in self._tracked.items() if t[1] is not None and now - t[2] >= older_than_s]
            for request_id in stale:
                self._release(request_id)
            return len(stale)

    def _release(self, request_id: Any) -> None:
        tracked = self._tracked.pop(request_id)
        self.ready_finals.append(tracked[1])
        self.wake.set()

    def pending(self) -> bool:
        """Whether anything was recorded since the last take(), a gauge's change included."""
        with self._lock:
            gauges = (self.running, self.waiting, self.kv_cache_usage)
            recorded = self.prompt_tokens or self.generation_tokens or self.preemptions or self.finished_ids
            return bool(recorded or any(h.count for h in self.histograms.values())) or gauges != self._gauges_taken

    def take(self) -> dict[str, Any]:
        """Everything recorded since the last take(), the current gauges, and the final sends now due."""
        with self._lock:
            snapshot = {
                "prompt_tokens": self.prompt_tokens,
                "generation_tokens": self.generation_tokens,
                "preemptions": self.preemptions,
                "finished_by_reason": self.finished_by_reason,
                "histograms": self.histograms,
                "finished_ids": self.finished_ids,
                "running": self.running,
                "waiting": self.waiting,
                "kv_cache_usage": self.kv_cache_usage,
                "ready_finals": self.ready_finals,
            }
            self._gauges_taken = (self.running, self.waiting, self.kv_cache_usage)
            self._reset()
            self.wake.clear()
        return snapshot


def stat_loggers(accumulator: MetricsAccumulator | None) -> list[type]:
    """The stat loggers AsyncLLM is built with, in the stub or in ENGINE_PROCESS's process: the accumulator's where
    metrics are reported, and in place of vLLM's Prometheus logger one that records nothing."""
    loggers = [make_stat_logger_class(accumulator)] if accumulator is not None else []
    unexported = make_unexported_prometheus_class()
    if unexported is not None:
        loggers.append(unexported)
    return loggers


def make_stat_logger_class(accumulator: MetricsAccumulator) -> type:
    """A vLLM StatLoggerBase subclass feeding ``accumulator`` (built after vLLM is imported)."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class TritonStatLogger(StatLoggerBase):
        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.engine_index = engine_index

        def record(self, scheduler_stats: Any = None, iteration_stats: Any = None, *args: Any, **kwargs: Any) -> None:
            accumulator.record(scheduler_stats, iteration_stats)

        def log_engine_initialized(self) -> None:
            pass

    return TritonStatLogger


def make_unexported_prometheus_class() -> type | None:
    """A stand-in for vLLM's Prometheus stat logger, which records nothing; None where vLLM lacks the hook.

    vLLM adds its Prometheus logger to every engine unless one of the loggers it is given is one. In the stub its
    registry is exported nowhere (Triton's metrics port shows the families TritonMetrics reports), yet it costs the
    engine loop a histogram update per token: 3.5 % of the loop's time in vllm serve's API server at 128 streams on
    the H200. This subclass skips the parent's constructor, so it registers nothing."""
    try:
        from vllm.v1.metrics.loggers import AggregateStatLoggerBase, PrometheusStatLogger
    except ImportError:
        return None
    if not issubclass(PrometheusStatLogger, AggregateStatLoggerBase):
        return None

    class UnexportedPrometheusStatLogger(PrometheusStatLogger):
        def __init__(self, vllm_config: Any, engine_indexes: Any = None) -> None:
            self.engine_indexes = engine_indexes

        def record(self, *args: Any, **kwargs: Any) -> None:
            pass

        def record_sleep_state(self, *args: Any, **kwargs: Any) -> None:
            pass

        def log(self) -> None:
            pass

        def log_engine_initialized(self) -> None:
            pass

    return UnexportedPrometheusStatLogger
