"""The bundled backend in a real Triton server (2.51) with real vLLM on the CPU, driven by real clients
(tritonclient gRPC streaming, HTTP generate / generate_stream).

One server for the whole module (starting vLLM costs tens of seconds on 2 cores). The last tests are destructive and
run in file order: the engine's death, then the server's shutdown.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.backend_server import METRICS_OFF_MODELS, engine_args
from tests.support.serving import needs_serving
from tests.support.triton_clients import (
    cancel_mid_stream,
    generate,
    generate_stream,
    grpc_stream,
    http,
    is_final,
    metric,
    metric_types,
    metrics_text,
    sample_labels,
    scrape_metrics,
    tensor_inputs,
    wait_metrics_flushed,
)
from vllm_repo.backend.vllm_repo_backend import metrics

pytestmark = [pytest.mark.e2e, needs_serving]

grpcclient = pytest.importorskip("tritonclient.grpc")
grpcaio = pytest.importorskip("tritonclient.grpc.aio")

MODEL = "tiny"  # as in conftest.py
DEFAULT_MAX_TOKENS = 24  # the DEFAULT_MAX_TOKENS parameter of conftest.py's config.pbtxt


# -- clients ---------------------------------------------------------------------------------------------------------


# -- text, streaming, additional outputs -----------------------------------------------------------------------------


def test_http_generate_returns_prompt_and_completion(triton):
    status, body = generate(
        triton,
        {"text_input": "The quick brown fox", "sampling_parameters": json.dumps({"max_tokens": 8, "temperature": 0})},
    )
    assert status == 200, body
    assert body["text_output"].startswith("The quick brown fox")
    assert len(body["text_output"]) > len("The quick brown fox")


def test_a_healthy_server_after_native_requests_logs_no_deprecation_and_doctor_finds_it_healthy(triton):
    from typer.testing import CliRunner

    from vllm_repo.cli import build_app
    from vllm_repo.doctor import diagnose_server

    for stream in (False, True):
        status, text = http(
            triton,
            f"/v2/models/{MODEL}/generate{'_stream' if stream else ''}",
            {"text_input": "Once upon a time", "stream": stream, "sampling_parameters": '{"max_tokens": 4}'},
        )
        assert status == 200, text
    # vLLM 0.32 deprecates raw prompts with a warning per request: the backend renders them as vLLM would.
    assert "Passing raw prompts" not in triton.log_text()
    diagnosis = diagnose_server(triton.http_url)
    assert diagnosis.findings == [], [d.text() for d in diagnosis.findings]
    done = CliRunner().invoke(build_app(), ["doctor", "--url", triton.http_url])
    assert done.exit_code == 0, done.output


def test_exclude_input_in_output_and_greedy_determinism(triton):
    sampling = json.dumps({"max_tokens": 8, "temperature": 0})
    _, full = generate(triton, {"text_input": "Hello world", "sampling_parameters": sampling})
    _, bare = generate(
        triton, {"text_input": "Hello world", "sampling_parameters": sampling, "exclude_input_in_output": True}
    )
    assert full["text_output"] == "Hello world" + bare["text_output"]


def test_http_generate_stream_sends_deltas_that_add_up(triton):
    sampling = {"max_tokens": 16, "temperature": 0, "ignore_eos": True}
    events = generate_stream(
        triton,
        {
            "text_input": "Hello world",
            "stream": True,
            "sampling_parameters": json.dumps(sampling),
            "return_num_output_tokens": True,
        },
    )
    assert len(events) > 1
    assert sum(e["num_output_tokens"] for e in events) == 16
    _, whole = generate(
        triton,
        {"text_input": "Hello world", "sampling_parameters": json.dumps(sampling), "exclude_input_in_output": True},
    )
    # Streams carry only new text: concatenated, the deltas are the complete (greedy) completion.
    assert "".join(e["text_output"] for e in events) == whole["text_output"]


def test_stream_one_response_per_token_gives_each_token_its_own_response(triton):
    """A second model, the first's copy with STREAM_ONE_RESPONSE_PER_TOKEN, loaded beside it for this test."""
    import shutil

    name = "tiny_per_token"
    shutil.copytree(triton.model_repository / MODEL, triton.model_repository / name)
    config = (triton.model_repository / MODEL / "config.pbtxt").read_text()
    config = config.replace("ENABLE_VLLM_HEALTH_CHECK", "STREAM_ONE_RESPONSE_PER_TOKEN")
    (triton.model_repository / name / "config.pbtxt").write_text(config)
    status, text = http(triton, f"/v2/repository/models/{name}/load", {}, timeout=300)
    assert status == 200, text
    try:
        sampling = json.dumps({"max_tokens": 16, "temperature": 0, "ignore_eos": True})
        body = {"text_input": "Hello world", "sampling_parameters": sampling}
        status, text = http(
            triton, f"/v2/models/{name}/generate_stream", {**body, "stream": True, "return_num_output_tokens": True}
        )
        assert status == 200, text
        events = [json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: ")]
        assert [e["num_output_tokens"] for e in events] == [1] * 16
        _, whole = generate(triton, {**body, "exclude_input_in_output": True})
        assert "".join(e["text_output"] for e in events) == whole["text_output"]  # the same greedy completion
    finally:
        http(triton, f"/v2/repository/models/{name}/unload", {}, timeout=120)


def test_grpc_stream_every_additional_output_and_final_flag_on_last_data_response(triton, token_counter):
    prompt = "Triton serves models"
    results, error = grpc_stream(
        triton,
        prompt,
        {"max_tokens": 12, "ignore_eos": True, "logprobs": 0},
        stream=True,
        return_finish_reason=True,
        return_cumulative_logprob=True,
        return_logprobs=True,
        return_num_input_tokens=True,
        return_num_output_tokens=True,
    )
    assert error is None, error
    # The final flag rides on the last data response: no empty trailing response.
    assert results[-1].as_numpy("text_output") is not None
    assert all(not is_final(r) for r in results[:-1])
    n_tokens = sum(int(r.as_numpy("num_output_tokens")[0]) for r in results)
    assert n_tokens == 12
    (expected_prompt_tokens,) = token_counter(prompt)
    assert {int(r.as_numpy("num_input_tokens")[0]) for r in results} == {expected_prompt_tokens}
    reasons = [r.as_numpy("finish_reason")[0].decode() for r in results]
    assert reasons[-1] == "length" and set(reasons[:-1]) <= {"None"}
    positions = [p for r in results for p in json.loads(r.as_numpy("logprobs")[0])]
    assert len(positions) == 12 and all(len(p) == 1 for p in positions)
    total = sum(next(iter(p.values()))["logprob"] for p in positions)
    final_cumulative = float(results[-1].as_numpy("cumulative_logprob")[0])
    assert final_cumulative < 0 and math.isclose(final_cumulative, total, rel_tol=1e-4, abs_tol=1e-3)


def test_a_client_asking_for_some_outputs_gets_only_those(triton):
    # bench's native client asks for the token counts only. The backend must not build the others: Triton's stub
    # would prune them with the GIL released, and freeing their arrays there crashed the stub under load.
    flags = {"return_num_input_tokens": True, "return_num_output_tokens": True}
    results, error = grpc_stream(
        triton, "Hello", {"max_tokens": 8, "ignore_eos": True}, stream=True, outputs=("num_output_tokens",), **flags
    )
    assert error is None, error
    assert len(results) > 1 and is_final(results[-1])
    assert all(r.as_numpy("text_output") is None and r.as_numpy("num_input_tokens") is None for r in results)
    assert sum(int(r.as_numpy("num_output_tokens")[0]) for r in results) == 8


def test_logprob_outputs_without_logprobs_in_the_sampling_parameters_are_null_and_nan(triton):
    # As Triton's own vLLM backend: log-probabilities come only when the sampling parameters ask for them.
    flags = {"return_logprobs": True, "return_cumulative_logprob": True, "return_num_output_tokens": True}
    results, error = grpc_stream(triton, "Hello", {"max_tokens": 6, "ignore_eos": True}, stream=True, **flags)
    assert error is None, error
    assert len(results) > 1
    assert [json.loads(r.as_numpy("logprobs")[0]) for r in results] == [None] * len(results)
    assert all(math.isnan(float(r.as_numpy("cumulative_logprob")[0])) for r in results)
    status, body = generate(
        triton, {"text_input": "Hello", "sampling_parameters": json.dumps({"max_tokens": 6}), **flags}
    )
    assert status == 200, body
    assert json.loads(body["logprobs"]) is None
    assert body["cumulative_logprob"] is None or math.isnan(body["cumulative_logprob"]), body


def test_grpc_non_streaming_request_gets_exactly_one_response(triton):
    results, error = grpc_stream(
        triton, "Hello", {"max_tokens": 5, "ignore_eos": True}, stream=False, return_num_output_tokens=True
    )
    assert error is None, error
    assert len(results) == 1 and is_final(results[0])
    assert int(results[0].as_numpy("num_output_tokens")[0]) == 5
    assert results[0].as_numpy("text_output")[0].decode().startswith("Hello")


def test_default_max_tokens_comes_from_config_not_vllms_16(triton):
    _, body = generate(
        triton,
        {"text_input": "Hi", "return_num_output_tokens": True, "sampling_parameters": json.dumps({"ignore_eos": True})},
    )
    assert body["num_output_tokens"] == DEFAULT_MAX_TOKENS


def test_request_parameters_are_sampling_parameters(triton):
    _, body = generate(
        triton,
        {"text_input": "Hi", "return_num_output_tokens": True, "parameters": {"max_tokens": 3, "ignore_eos": True}},
    )
    assert body["num_output_tokens"] == 3


def test_n_completions(triton):
    _, body = generate(
        triton,
        {
            "text_input": "Hi",
            "return_num_output_tokens": True,
            "exclude_input_in_output": True,
            "sampling_parameters": json.dumps({"n": 3, "max_tokens": 4, "ignore_eos": True, "seed": 1}),
        },
    )
    assert body["num_output_tokens"] == [4, 4, 4]
    assert len(body["text_output"]) == 3


def test_false_string_is_false(triton):
    # detokenize "false" must turn detokenization off: bool("false") would have left it on.
    _, off = generate(
        triton,
        {
            "text_input": "Hi",
            "exclude_input_in_output": True,
            "return_num_output_tokens": True,
            "sampling_parameters": json.dumps({"max_tokens": 4, "ignore_eos": True, "detokenize": "false"}),
        },
    )
    _, on = generate(
        triton,
        {
            "text_input": "Hi",
            "exclude_input_in_output": True,
            "sampling_parameters": json.dumps({"max_tokens": 4, "ignore_eos": True, "detokenize": "true"}),
        },
    )
    assert off["num_output_tokens"] == 4 and off["text_output"] == ""
    assert on["text_output"] != ""


# -- structured outputs ----------------------------------------------------------------------------------------------


def test_structured_output_choice(triton):
    for seed in range(3):
        _, body = generate(
            triton,
            {
                "text_input": "Answer:",
                "exclude_input_in_output": True,
                "sampling_parameters": json.dumps(
                    {"max_tokens": 10, "seed": seed, "structured_outputs": {"choice": ["yes", "no"]}}
                ),
            },
        )
        assert body["text_output"] in ("yes", "no"), body


def test_structured_output_regex_through_the_older_key(triton):
    _, body = generate(
        triton,
        {
            "text_input": "Number:",
            "exclude_input_in_output": True,
            "sampling_parameters": json.dumps({"max_tokens": 10, "guided_decoding": {"regex": "[0-9]{3}"}}),
        },
    )
    assert len(body["text_output"]) == 3 and body["text_output"].isdigit(), body


def test_structured_output_json_schema(triton):
    # A random-weight model loves whitespace, which JSON allows between tokens; an enum keeps the document short.
    schema = {"type": "string", "enum": ["alpha", "beta"]}
    for seed in range(2):
        _, body = generate(
            triton,
            {
                "text_input": "JSON:",
                "exclude_input_in_output": True,
                "sampling_parameters": json.dumps(
                    {"max_tokens": 100, "seed": seed, "structured_outputs": {"json": schema}}
                ),
            },
        )
        assert json.loads(body["text_output"]) in ("alpha", "beta"), body


# -- LoRA ------------------------------------------------------------------------------------------------------------


def test_lora_adapter_from_multi_lora_json_changes_the_output(triton):
    def greedy(**extra):
        _, body = generate(
            triton,
            {
                "text_input": "Hello world",
                "exclude_input_in_output": True,
                "sampling_parameters": json.dumps({"max_tokens": 12, "temperature": 0, **extra}),
            },
        )
        return body["text_output"]

    base, adapted = greedy(), greedy(lora_name="doll")
    assert adapted != base
    assert greedy(lora_name="doll") == adapted and greedy() == base


# -- bad input -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sampling, fragment",
    [
        (
            json.dumps({"temprature": 0.5}),
            'sampling_parameters.temprature: is not a vLLM sampling parameter (did you mean "temperature"?)',
        ),
        (json.dumps({"max_tokens": "8k"}), "sampling_parameters.max_tokens: must be an integer"),
        (json.dumps({"temperature": -1}), "sampling_parameters.temperature"),
        (json.dumps({"top_p": 7}), "top_p"),
        ("{not json", "sampling_parameters: is not valid JSON"),
        (json.dumps({"lora_name": "dolly"}), 'unknown adapter "dolly" (did you mean "doll"?)'),
        (json.dumps({"structured_outputs": {"choices": ["a"]}}), 'did you mean "choice"'),
        (json.dumps({"n": 0}), "sampling_parameters.n"),
        (json.dumps({"stop": 5}), "sampling_parameters.stop: must be a string or a list of strings"),
    ],
)
def test_bad_sampling_parameters_get_an_error_naming_the_field(triton, sampling, fragment):
    status, body = generate(triton, {"text_input": "Hi", "sampling_parameters": sampling})
    assert status == 400, body
    assert fragment in body["error"], body


def test_an_empty_prompt_is_blamed_on_text_input(triton):
    status, body = generate(triton, {"text_input": "", "sampling_parameters": json.dumps({"max_tokens": 2})})
    assert status == 400 and "text_input" in body["error"] and "empty" in body["error"], body
    assert "sampling_parameters" not in body["error"], body


def test_bad_image_is_an_error_naming_the_input(triton):
    status, body = generate(triton, {"text_input": "Hi", "image": ["not base64 !!"]})
    assert status == 400 and "image[0]" in body["error"], body


def test_errors_over_grpc_streams_and_the_model_stays_healthy(triton):
    results, error = grpc_stream(triton, "Hi", {"temprature": 1}, stream=True)
    assert results == [] and "did you mean" in str(error)
    assert http(triton, f"/v2/models/{MODEL}/ready")[0] == 200
    results, error = grpc_stream(triton, "Hi", {"max_tokens": 2}, stream=True)
    assert error is None and is_final(results[-1])


# -- cancellation, concurrency, metrics ------------------------------------------------------------------------------


def test_cancellation_mid_stream_aborts_the_request_in_the_engine(triton):
    wait_metrics_flushed()
    before = scrape_metrics(triton)
    cancel_mid_stream(triton)
    wait_metrics_flushed()
    after = scrape_metrics(triton)
    wait_metrics_flushed()
    later = scrape_metrics(triton)
    generated = metric(after, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total")
    # Stopped well short of 480 tokens, and nothing keeps generating for it.
    assert generated < 400
    assert metric(later, "vllm:generation_tokens_total") == metric(after, "vllm:generation_tokens_total")
    assert metric(later, "vllm:num_requests_running") == 0


def test_32_concurrent_streams_each_get_all_their_tokens(triton):
    async def one(client, i):
        async def requests():
            yield {
                "model_name": MODEL,
                "inputs": tensor_inputs(
                    f"Request {i}",
                    {"max_tokens": 48, "ignore_eos": True, "seed": i},
                    stream=True,
                    return_num_output_tokens=True,
                    return_finish_reason=True,
                ),
                "request_id": str(i),
            }

        tokens, reason = 0, None
        stream = client.stream_infer(requests())
        try:
            async for result, error in stream:
                assert error is None, error
                tokens += int(result.as_numpy("num_output_tokens")[0])
                reason = result.as_numpy("finish_reason")[0].decode()
                if is_final(result):
                    break
        finally:
            stream.cancel()
        return tokens, reason

    async def main():
        client = grpcaio.InferenceServerClient(triton.grpc_url)
        try:
            return await asyncio.wait_for(asyncio.gather(*(one(client, i) for i in range(32))), timeout=300)
        finally:
            await client.close()

    results = asyncio.run(main())
    assert results == [(48, "length")] * 32


def test_metrics_are_reported(triton):
    wait_metrics_flushed()
    before = scrape_metrics(triton)
    _, body = generate(
        triton,
        {
            "text_input": "Count me",
            "return_num_input_tokens": True,
            "sampling_parameters": json.dumps({"max_tokens": 10, "ignore_eos": True}),
        },
    )
    wait_metrics_flushed()
    after = scrape_metrics(triton)

    def delta(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert delta("vllm:generation_tokens_total") == 10
    assert delta("vllm:prompt_tokens_total") == body["num_input_tokens"]
    assert delta("vllm:request_success_total", finished_reason="length") == 1
    for histogram in (
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_generation_tokens",
        "vllm:request_params_n",
    ):
        assert delta(f"{histogram}_count") == 1, histogram
    assert delta("vllm:request_generation_tokens_sum") == 10
    assert delta("vllm:time_per_output_token_seconds_count") == 10 - 1  # one per token after the first
    assert metric(after, "vllm:num_requests_running") == 0
    assert metric(after, "vllm:num_requests_waiting") == 0
    assert 0 <= metric(after, "vllm:kv_cache_usage_perc") <= 1


def test_metric_families_are_those_of_tritons_own_vllm_backend(triton):
    text = metrics_text(triton)
    # triton-inference-server/vllm_backend, src/utils/metrics.py: name, type, buckets.
    tokens = metrics.token_buckets(engine_args(Path("m"))["max_model_len"])
    original = {
        "vllm:prompt_tokens_total": ("counter", None),
        "vllm:generation_tokens_total": ("counter", None),
        "vllm:time_to_first_token_seconds": ("histogram", metrics.TTFT_BUCKETS),
        "vllm:time_per_output_token_seconds": ("histogram", metrics.TPOT_BUCKETS),
        "vllm:e2e_request_latency_seconds": ("histogram", metrics.E2E_BUCKETS),
        "vllm:request_prompt_tokens": ("histogram", tokens),
        "vllm:request_generation_tokens": ("histogram", tokens),
        "vllm:request_params_n": ("histogram", metrics.N_PARAM_BUCKETS),
    }
    types = metric_types(text)
    for family, (kind, buckets) in original.items():
        if kind == "histogram":
            # The same series as Triton's histogram metrics, kept as counters (REPORT_HISTOGRAMS_PER_VALUE "false",
            # the default: a report costs one call per changed series, not one per value).
            assert family not in types, family
            assert all(types.get(family + suffix) == "counter" for suffix in ("_bucket", "_sum", "_count")), family
        else:
            assert types.get(family) == kind, family
        everyone = sample_labels(text, family)
        # Every sample is labelled by model and version only; other tests may load other models into this server.
        assert everyone and all(set(ls) - {"le"} == {"model", "version"} for ls in everyone), (family, everyone)
        labels = [ls for ls in everyone if ls["model"] == MODEL]
        assert labels and all(ls["version"] == "1" for ls in labels), (family, everyone)
        if buckets is not None:
            # As counters, a histogram's bucket series come in the server's order of their labels, not by bound.
            bounds = sorted(float(ls["le"]) for ls in labels if "le" in ls)
            assert bounds == [*map(float, buckets), math.inf], family
    # The gauges this backend adds stay.
    for gauge in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert types.get(gauge) == "gauge", gauge

    # request_params_n: one sample per request, of its n.
    before = scrape_metrics(triton)
    n = 2
    status, body = generate(
        triton,
        {
            "text_input": "Hi",
            "return_num_output_tokens": True,
            "sampling_parameters": json.dumps({"n": n, "max_tokens": 3, "ignore_eos": True}),
        },
    )
    after = scrape_metrics(triton)
    assert status == 200 and len(body["num_output_tokens"]) == n, body
    assert metric(after, "vllm:request_params_n_count") - metric(before, "vllm:request_params_n_count") == 1
    assert metric(after, "vllm:request_params_n_sum") - metric(before, "vllm:request_params_n_sum") == n
    # Every completion's stats came before the response: none was sent without them.
    assert "went out without their request's stats" not in triton.log_text()


def test_a_scrape_right_after_the_final_response_counts_the_request(triton):
    wait_metrics_flushed()
    before = scrape_metrics(triton)
    _, body = generate(
        triton,
        {
            "text_input": "Count me at once",
            "return_num_output_tokens": True,
            "sampling_parameters": json.dumps({"max_tokens": 7, "ignore_eos": True}),
        },
    )
    after = scrape_metrics(triton)  # no wait: the response must not overtake its metrics
    results, error = grpc_stream(
        triton, "Stream me", {"max_tokens": 5, "ignore_eos": True}, stream=True, return_num_output_tokens=True
    )
    after_stream = scrape_metrics(triton)
    assert error is None, error
    streamed = sum(int(r.as_numpy("num_output_tokens")[0]) for r in results)

    def delta(later, earlier, name, **labels):
        return metric(later, name, **labels) - metric(earlier, name, **labels)

    for later, earlier, tokens in ((after, before, body["num_output_tokens"]), (after_stream, after, streamed)):
        assert delta(later, earlier, "vllm:request_success_total", finished_reason="length") == 1
        assert delta(later, earlier, "vllm:e2e_request_latency_seconds_count") == 1
        assert delta(later, earlier, "vllm:generation_tokens_total") == tokens
        assert delta(later, earlier, "vllm:request_generation_tokens_sum") == tokens
        assert delta(later, earlier, "vllm:time_per_output_token_seconds_count") == tokens - 1


def test_time_per_output_token_has_one_sample_per_token(triton):
    wait_metrics_flushed()
    before = scrape_metrics(triton)

    async def main():
        client = grpcaio.InferenceServerClient(triton.grpc_url)

        async def one(i):
            async def requests():
                yield {
                    "model_name": MODEL,
                    "inputs": tensor_inputs(
                        f"Request {i}",
                        {"max_tokens": 16, "ignore_eos": True},
                        stream=False,
                        return_num_output_tokens=True,
                    ),
                }

            stream = client.stream_infer(requests())
            try:
                async for result, error in stream:
                    assert error is None, error
                    return int(result.as_numpy("num_output_tokens")[0])
            finally:
                stream.cancel()

        try:
            return await asyncio.gather(*(one(i) for i in range(6)))
        finally:
            await client.close()

    tokens = asyncio.run(main())
    after = scrape_metrics(triton)
    count = metric(after, "vllm:time_per_output_token_seconds_count") - metric(
        before, "vllm:time_per_output_token_seconds_count"
    )
    assert count == sum(t - 1 for t in tokens)
    assert metric(after, "vllm:time_per_output_token_seconds_sum") > metric(
        before, "vllm:time_per_output_token_seconds_sum"
    )


def test_gauges_see_running_requests(triton):
    async def main():
        client = grpcaio.InferenceServerClient(triton.grpc_url)

        async def one(i):
            async def requests():
                yield {
                    "model_name": MODEL,
                    "inputs": tensor_inputs("x", {"max_tokens": 400, "ignore_eos": True}, stream=True),
                }

            stream = client.stream_infer(requests())
            try:
                async for result, error in stream:
                    if error is not None or is_final(result):
                        break
            finally:
                stream.cancel()

        tasks = [asyncio.create_task(one(i)) for i in range(4)]
        peak_running, peak_usage = 0.0, 0.0
        # 400 tokens take well under a second on a tiny model: sample often.
        for _ in range(120):
            await asyncio.sleep(0.05)
            values = await asyncio.to_thread(scrape_metrics, triton)
            peak_running = max(peak_running, metric(values, "vllm:num_requests_running"))
            peak_usage = max(peak_usage, metric(values, "vllm:kv_cache_usage_perc"))
            if peak_running >= 4 and peak_usage > 0:
                break
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()
        return peak_running, peak_usage

    peak_running, peak_usage = asyncio.run(main())
    assert peak_running >= 4 and peak_usage > 0


def test_no_vllm_metric_when_stats_are_off_or_metrics_not_asked_for(triton_metrics_off):
    for model in METRICS_OFF_MODELS:
        status, text = http(
            triton_metrics_off,
            f"/v2/models/{model}/generate",
            {"text_input": "Hi", "sampling_parameters": json.dumps({"max_tokens": 4})},
        )
        assert status == 200, text
    time.sleep(1.2)  # past a periodic report, had there been one
    page = metrics_text(triton_metrics_off)
    assert "nv_inference_request_success" in page  # the metrics port itself answers
    assert [line for line in page.splitlines() if "vllm:" in line] == []


# -- destructive: engine death, then shutdown ------------------------------------------------------------------------


def _engine_core_pid(server) -> int:
    from vllm_repo.serve.processes import process_group_members

    for pid in process_group_members(server.pgid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.startswith(b"VLLM::EngineCore"):
            return pid
    raise AssertionError("no VLLM::EngineCore process in the server's process group")


def test_engine_death_gives_clear_errors_and_the_model_goes_unready(triton):
    os.kill(_engine_core_pid(triton), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while True:
        status, body = generate(triton, {"text_input": "Hi", "sampling_parameters": json.dumps({"max_tokens": 2})})
        if status != 200:
            break
        assert time.monotonic() < deadline, "requests still succeed after the engine was killed"
        time.sleep(0.2)
    # The error names what died, as vLLM logged it, and the log to read, and what becomes of the model.
    assert "vLLM engine has died: " in body["error"] and "engine core" in body["error"], body
    assert f"(log: {triton.log_path})" in body["error"], body
    assert "ENABLE_VLLM_HEALTH_CHECK unloads the model, so it reports not ready" in body["error"], body
    while http(triton, f"/v2/models/{MODEL}/ready")[0] == 200:
        assert time.monotonic() < deadline, "the model still reports ready with a dead engine"
        time.sleep(0.2)
    assert "vLLM engine has died" in triton.log_text()
    # Unloaded, the model is unknown to Triton; vllm-repo's client says it is in the repository but not loaded.
    from vllm_repo.serve.infer import InferError, stream_events

    with pytest.raises(InferError) as refused:
        list(stream_events(triton.http_url, MODEL, {"text_input": "Hi"}, stream=False))
    said = str(refused.value)
    assert f"model '{MODEL}' at {triton.http_url} is not loaded (Triton: " in said, said
    assert "UNLOADING" in said or "UNAVAILABLE" in said, said
    assert "engine died" in refused.value.hint and f"/v2/repository/models/{MODEL}/load" in refused.value.hint


def test_shutdown_leaves_no_process_and_no_shared_memory(triton):
    from vllm_repo.serve.processes import process_group_members, shm_segments

    pgid = triton.pgid
    assert process_group_members(pgid)
    started = time.monotonic()
    triton.stop(timeout=60)
    took = time.monotonic() - started
    assert process_group_members(pgid) == []
    assert shm_segments(triton.shm_prefix) == []
    assert triton.escalated_to is None, triton.log_tail()  # the server's own shutdown stopped everything
    assert took < 30
