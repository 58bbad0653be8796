"""The backend's metrics without Triton or vLLM: what the accumulator sums from vLLM's stats, final responses held
until their request is recorded, and the settings that turn metrics on."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from vllm_repo.backend.vllm_repo_backend import (
    errors,
    metrics,
    native,
)


def _finished(request_id="r1", generation_tokens=4, reason="length"):
    return SimpleNamespace(
        finish_reason=reason,
        request_id=request_id,
        e2e_latency=0.5,
        queued_time=0.01,
        num_prompt_tokens=3,
        num_generation_tokens=generation_tokens,
        mean_time_per_output_token=0.02,
    )


def _iteration(generation_tokens=0, ttft=(), itl=(), n_params=(), finished=()):
    return SimpleNamespace(
        num_prompt_tokens=3 if ttft else 0,
        num_generation_tokens=generation_tokens,
        num_preempted_reqs=0,
        time_to_first_tokens_iter=list(ttft),
        inter_token_latencies_iter=list(itl),
        n_params_iter=list(n_params),
        finished_requests=list(finished),
    )


def test_metrics_accumulator_sums_until_taken_and_keeps_gauges():
    acc = metrics.MetricsAccumulator()
    acc.record(SimpleNamespace(num_running_reqs=2, num_waiting_reqs=1, kv_cache_usage=0.25), _iteration(1, ttft=[0.1]))
    acc.record(None, _iteration(2, itl=[0.02, 0.03]))
    acc.record(None, _iteration(1, itl=[0.04], n_params=[1], finished=[_finished(generation_tokens=4)]))
    s = acc.take()
    assert (s["prompt_tokens"], s["generation_tokens"]) == (3, 4)
    assert s["finished_by_reason"] == {"length": 1}
    h = s["histograms"]
    assert [(h[n].count, h[n].total) for n in ("ttft", "e2e", "request_params_n")] == [(1, 0.1), (1, 0.5), (1, 1.0)]
    assert h["tpot"].count == 3 and math.isclose(h["tpot"].total, 0.09)
    assert h["ttft"].values is None  # summed per bucket only: the values are not kept unless reported one by one
    assert (s["running"], s["waiting"], s["kv_cache_usage"]) == (2, 1, 0.25)
    again = acc.take()
    assert again["generation_tokens"] == 0 and again["histograms"]["ttft"].count == 0
    assert again["histograms"]["tpot"].count == 0
    assert again["running"] == 2  # gauges persist


def test_time_per_output_token_is_one_sample_per_token_after_the_first():
    # As Triton's own vLLM backend reports it: vLLM's inter-token latencies, not one mean per request.
    acc = metrics.MetricsAccumulator(keep_values=True)
    tokens_by_request = {"a": 16, "b": 16, "c": 5}
    itl = {rid: [0.01 * (i + 1) for i in range(tokens - 1)] for rid, tokens in tokens_by_request.items()}
    acc.record(None, _iteration(len(tokens_by_request), ttft=[0.1] * len(tokens_by_request)))
    for step in range(max(tokens_by_request.values()) - 1):
        samples = [latencies[step] for latencies in itl.values() if step < len(latencies)]
        acc.record(None, _iteration(len(samples), itl=samples))
    acc.record(None, _iteration(0, finished=[_finished(rid, t) for rid, t in tokens_by_request.items()]))
    h = acc.take()["histograms"]
    assert h["tpot"].count == len(h["tpot"].values) == sum(t - 1 for t in tokens_by_request.values())
    assert math.isclose(h["tpot"].total, sum(sum(v) for v in itl.values()))
    assert h["request_generation_tokens"].values == list(tokens_by_request.values())


def test_a_final_response_waits_until_its_request_is_recorded():
    acc = metrics.MetricsAccumulator()
    sent = []
    acc.expect("r1", 1)
    acc.send_final_after_stats("r1", lambda: sent.append("r1"))
    acc.forget("r1")  # the request's task ends; the held response stays
    assert acc.take()["ready_finals"] == [] and not acc.wake.is_set()
    acc.record(None, _iteration(1, itl=[0.01], finished=[_finished("r1")]))
    assert acc.wake.is_set()
    s = acc.take()
    assert s["finished_by_reason"] == {"length": 1}  # taken together with the response it released
    for send in s["ready_finals"]:
        send()
    assert sent == ["r1"] and not acc.wake.is_set()


def test_stats_taken_in_the_engine_process_merge_into_the_stubs_and_release_its_held_final():
    engine = metrics.MetricsAccumulator()  # ENGINE_PROCESS: vLLM records there
    stub = metrics.MetricsAccumulator()  # and the stub, which holds the final responses, reports
    stub.expect("r1", 1)
    stub.send_final_after_stats("r1", "send r1")
    engine.record(SimpleNamespace(num_running_reqs=1, num_waiting_reqs=0, kv_cache_usage=0.5), _iteration(1, [0.1]))
    assert engine.pending()
    first = engine.take()
    assert not engine.pending()
    stub.merge(first)
    assert not stub.wake.is_set()  # r1 has not finished yet
    engine.record(None, _iteration(2, itl=[0.02, 0.03], finished=[_finished("r1"), _finished("other")]))
    stub.merge(engine.take())
    assert stub.wake.is_set()
    s = stub.take()
    assert s["ready_finals"] == ["send r1"] and stub._tracked == {}
    assert (s["prompt_tokens"], s["generation_tokens"]) == (3, 3)
    assert (s["histograms"]["ttft"].count, s["histograms"]["tpot"].count) == (1, 2)
    assert math.isclose(s["histograms"]["tpot"].total, 0.05)
    assert s["finished_by_reason"] == {"length": 2} and s["finished_ids"] == ["r1", "other"]
    assert (s["running"], s["kv_cache_usage"]) == (1, 0.5)
    # The engine going idle records nothing but its gauges: that is news for the stub too.
    engine.record(SimpleNamespace(num_running_reqs=0, num_waiting_reqs=0, kv_cache_usage=0.0), None)
    assert engine.pending()
    stub.merge(engine.take())
    assert stub.take()["running"] == 0 and not engine.pending()


def test_a_final_response_whose_stats_came_first_is_due_at_once():
    acc = metrics.MetricsAccumulator()
    acc.expect("r1", 1)
    acc.record(None, _iteration(1, finished=[_finished("r1")]))
    acc.send_final_after_stats("r1", "send r1")
    acc.forget("r1")
    assert acc.take()["ready_finals"] == ["send r1"]
    assert acc._tracked == {}


def test_n_completions_wait_for_every_completion_and_other_requests_do_not_count():
    acc = metrics.MetricsAccumulator()
    acc.expect("parent", 3)
    acc.expect("other", 1)
    acc.record(None, _iteration(0, finished=[_finished("parent"), _finished("other")]))
    acc.send_final_after_stats("parent", "send parent")
    acc.record(None, _iteration(0, finished=[_finished("parent")]))
    assert acc.take()["ready_finals"] == []
    acc.record(None, _iteration(0, n_params=[3], finished=[_finished("parent")]))
    assert acc.take()["ready_finals"] == ["send parent"]


def test_held_final_responses_are_released_when_no_stats_will_come():
    acc = metrics.MetricsAccumulator()
    acc.expect("r1", 1)
    acc.send_final_after_stats("r1", "send r1")
    assert acc.release_held(older_than_s=60) == 0
    assert acc.release_held() == 1
    assert acc.take()["ready_finals"] == ["send r1"]


def test_bucket_boundaries_are_those_of_tritons_own_vllm_backend():
    # triton-inference-server/vllm_backend, src/utils/metrics.py
    ttft = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
    assert ttft == metrics.TTFT_BUCKETS
    assert metrics.TPOT_BUCKETS == (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
    assert metrics.E2E_BUCKETS == (1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
    assert metrics.N_PARAM_BUCKETS == (1, 2, 5, 10, 20)


@pytest.mark.parametrize(
    "report, disable_log_stats, enabled",
    [
        ("true", None, True),
        ("true", False, True),
        ("true", "false", True),
        ("true", True, False),
        ("true", "true", False),
        ("false", None, False),
        (None, None, False),
    ],
)
def test_metrics_are_on_only_with_report_custom_metrics_and_vllm_stats(report, disable_log_stats, enabled):
    params = {} if report is None else {"REPORT_CUSTOM_METRICS": report}
    engine_config = {} if disable_log_stats is None else {"disable_log_stats": disable_log_stats}
    assert metrics.metrics_enabled(params, engine_config) is enabled


def test_a_bad_disable_log_stats_is_a_config_error():
    with pytest.raises(errors.BackendConfigError, match="disable_log_stats"):
        metrics.metrics_enabled({"REPORT_CUSTOM_METRICS": "true"}, {"disable_log_stats": "sometimes"})


def test_older_vllm_cache_usage_name():
    acc = metrics.MetricsAccumulator()
    acc.record(SimpleNamespace(num_running_reqs=0, num_waiting_reqs=0, gpu_cache_usage=0.5), None)
    assert acc.take()["kv_cache_usage"] == 0.5


def test_token_buckets():
    assert metrics.token_buckets(512) == [1, 2, 5, 10, 20, 50, 100, 200, 500]


def test_validation_field_names_the_parameter():
    class VLLMValidationError(Exception):
        def __init__(self, message, parameter=None):
            super().__init__(message)
            self.parameter = parameter

    assert (
        native.validation_field(VLLMValidationError("x", parameter="temperature")) == "sampling_parameters.temperature"
    )
    assert native.validation_field(ValueError("top_p must be in (0, 1], got 7.0.")) == "sampling_parameters.top_p"
    assert native.validation_field(ValueError("Something odd")) == "sampling_parameters"
