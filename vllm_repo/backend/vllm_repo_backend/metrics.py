"""vLLM's metrics on Triton's metrics endpoint (config.pbtxt's REPORT_CUSTOM_METRICS): vLLM's per-iteration stats
collected on the engine loop, and a thread that reports them as Triton metric families and sends the final responses
that wait for their request's stats.

The families, names, labels and buckets are those of Triton's own vLLM backend, so that dashboards and alerts built
on it read the same series, plus a few of this backend's own (the engine's load and KV cache).
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from . import log, stub
from .configuration import bool_parameter
from .errors import BackendConfigError, RequestError
from .native import parse_bool

# How often the metrics thread reports what vLLM recorded. Short, so that the backlog a final response waits for (every
# value recorded since the last report, one round trip to the server each) stays small; an idle report costs no
# round trip.
METRICS_FLUSH_INTERVAL_S = 0.05


# Bucket boundaries of the families Triton's own vLLM backend exports, so that dashboards and alerts built on it
# read the same series. The queue-time histogram is this backend's own.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
E2E_BUCKETS = (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
N_PARAM_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
QUEUE_BUCKETS = (0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0)

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


class MetricsAccumulator:
    """Collects vLLM's per-iteration stats on the engine loop (cheap: no IPC there) and hands them to a flusher
    thread, which reports them to Triton. Every Triton metric call is a round trip to the server process, so
    per-token work on the engine loop would slow every stream.

    It also holds each request's final response until that request's stats are recorded; the flusher reports them
    before it sends the response, so a client that scrapes the metrics port right after its answer sees its request
    counted. Requests are tracked by vLLM request id, from ``expect()`` to ``forget()``, all on the engine loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
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
        self.ttft: list[float] = []
        self.tpot: list[float] = []
        self.e2e: list[float] = []
        self.queue: list[float] = []
        self.request_prompt_tokens: list[int] = []
        self.request_generation_tokens: list[int] = []
        self.request_params_n: list[int] = []
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
            self.ttft.extend(getattr(iteration_stats, "time_to_first_tokens_iter", ()) or ())
            # One sample per generated token after a request's first, as vLLM measures it (inter-token latency).
            self.tpot.extend(getattr(iteration_stats, "inter_token_latencies_iter", ()) or ())
            self.request_params_n.extend(getattr(iteration_stats, "n_params_iter", ()) or ())
            for finished in getattr(iteration_stats, "finished_requests", ()) or ():
                reason = str(getattr(finished, "finish_reason", "unknown")).lower()
                self.finished_by_reason[reason] = self.finished_by_reason.get(reason, 0) + 1
                self.e2e.append(finished.e2e_latency)
                self.queue.append(getattr(finished, "queued_time", 0.0))
                self.request_prompt_tokens.append(finished.num_prompt_tokens)
                self.request_generation_tokens.append(finished.num_generation_tokens)
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
            for name in HISTOGRAMS:
                getattr(self, name).extend(taken[name])
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
            return bool(self.prompt_tokens or self.generation_tokens or self.preemptions or self.finished_ids) or (
                gauges != self._gauges_taken
            )

    def take(self) -> dict[str, Any]:
        """Everything recorded since the last take(), the current gauges, and the final sends now due."""
        with self._lock:
            snapshot = {
                "prompt_tokens": self.prompt_tokens,
                "generation_tokens": self.generation_tokens,
                "preemptions": self.preemptions,
                "finished_by_reason": self.finished_by_reason,
                "ttft": self.ttft,
                "tpot": self.tpot,
                "e2e": self.e2e,
                "queue": self.queue,
                "request_prompt_tokens": self.request_prompt_tokens,
                "request_generation_tokens": self.request_generation_tokens,
                "request_params_n": self.request_params_n,
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


HISTOGRAMS = ("ttft", "tpot", "e2e", "queue", "request_prompt_tokens", "request_generation_tokens", "request_params_n")


class TritonMetrics:
    """vLLM's metric families on Triton's metrics endpoint (labels: model, version), and the thread that reports
    them and sends the final responses that waited for them."""

    def __init__(self, labels: Mapping[str, str], max_model_len: int, accumulator: MetricsAccumulator) -> None:
        family = stub.pb_utils.MetricFamily
        self._acc = accumulator
        self._labels = dict(labels)
        self._reason_counters: dict[str, Any] = {}

        # Triton deletes a family's metrics with the family object: keep every family alive as long as the model.
        self._families: list[Any] = []

        def metric(name: str, description: str, kind: Any, **extra: Any) -> Any:
            fam = family(name=name, description=description, kind=kind)
            self._families.append(fam)
            return fam.Metric(labels=self._labels, **extra)

        def counter(name: str, description: str) -> Any:
            return metric(name, description, family.COUNTER)

        def gauge(name: str, description: str) -> Any:
            return metric(name, description, family.GAUGE)

        def histogram(name: str, description: str, buckets: Sequence[float]) -> Any:
            return metric(name, description, family.HISTOGRAM, buckets=list(buckets))

        # The families Triton's own vLLM backend exports.
        self.prompt_tokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.tpot = histogram(
            "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", TPOT_BUCKETS
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", E2E_BUCKETS
        )
        tokens = token_buckets(max_model_len)
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.request_params_n = histogram(
            "vllm:request_params_n", "Histogram of the n request parameter.", N_PARAM_BUCKETS
        )
        # This backend's additions.
        self._success_family = family(
            name="vllm:request_success_total",
            description="Number of finished requests, by finish reason.",
            kind=family.COUNTER,
        )
        self._families.append(self._success_family)
        self.preemptions = counter("vllm:num_preemptions_total", "Cumulative number of preemptions from the engine.")
        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_cache_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.queue = histogram(
            "vllm:request_queue_time_seconds", "Histogram of time spent waiting in the queue.", QUEUE_BUCKETS
        )
        self._last_gauges: tuple | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            # Woken early by a final response that waits for its stats; otherwise a periodic report.
            self._acc.wake.wait(METRICS_FLUSH_INTERVAL_S)
            if self._acc.release_held(FINAL_RESPONSE_HOLD_LIMIT_S):
                log.warn("[vllm] final responses went out without their request's stats (none came)")
            self.flush()
        self._acc.release_held()
        self.flush()

    def flush(self) -> None:
        s = self._acc.take()
        try:
            gauges = (s["running"], s["waiting"], s["kv_cache_usage"])
            if gauges != self._last_gauges:  # each set() is a round trip to the server: only on change
                self.running.set(gauges[0])
                self.waiting.set(gauges[1])
                self.kv_cache_usage.set(gauges[2])
                self._last_gauges = gauges
            if s["prompt_tokens"]:
                self.prompt_tokens.increment(s["prompt_tokens"])
            if s["generation_tokens"]:
                self.generation_tokens.increment(s["generation_tokens"])
            if s["preemptions"]:
                self.preemptions.increment(s["preemptions"])
            for reason, count in s["finished_by_reason"].items():
                metric = self._reason_counters.get(reason)
                if metric is None:
                    metric = self._success_family.Metric(labels={**self._labels, "finished_reason": reason})
                    self._reason_counters[reason] = metric
                metric.increment(count)
            for name in HISTOGRAMS:
                histogram = getattr(self, name)
                for value in s[name]:
                    histogram.observe(float(value))
        except Exception:  # metrics must never take the model down
            log.error(f"[vllm] reporting metrics failed: {traceback.format_exc()}")
        for send in s["ready_finals"]:
            send()

    def stop(self) -> None:
        self._stop.set()
        self._acc.wake.set()
        self._thread.join(timeout=5)
        if self._thread.is_alive():
            return
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
