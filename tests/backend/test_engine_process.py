"""ENGINE_PROCESS: the bundled backend with vLLM in a process of its own, in a real Triton server (2.51) with real
vLLM on the CPU. What a client sees must be what it sees in the stub's own process (test_backend_e2e.py): the same
greedy text, the same outputs and errors, vLLM's metrics, one response per token, OpenAI requests through the gateway
(streamed over its socket from the engine's process), cancellation, and the engine's death. The OpenAI answers
themselves are compared with vllm serve's for both shapes in test_openai_backend.py.

One server for the module; the last test is destructive (the engine's process killed)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support.backend_server import MODEL_NAME, bundled_server, engine_args
from tests.support.serving import needs_serving
from tests.support.stacks import ready_server
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
    scrape_metrics,
    wait_metrics_flushed,
)
from tests.support.waiting import wait_for
from vllm_repo.backend.vllm_repo_backend import engine_stop
from vllm_repo.serve.guardian import Guardian
from vllm_repo.serve.ports import free_port

pytestmark = [pytest.mark.e2e, needs_serving]

grpcclient = pytest.importorskip("tritonclient.grpc")

CONFIG = """\
backend: "vllm"
instance_group [ { count: 1, kind: KIND_CPU } ]
parameters { key: "ENGINE_PROCESS" value: { string_value: "true" } }
parameters { key: "ENABLE_VLLM_HEALTH_CHECK" value: { string_value: "true" } }
parameters { key: "DEFAULT_MAX_TOKENS" value: { string_value: "24" } }
parameters { key: "REPORT_CUSTOM_METRICS" value: { string_value: "true" } }
parameters { key: "REPORT_HISTOGRAMS_PER_VALUE" value: { string_value: "true" } }
"""
IN_STUB = "tiny_in_stub"
READY = re.compile(r"model tiny ready \(vLLM [^,]+, process (\d+)\)")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="module")
def split(tiny_model_dir, tmp_path_factory):
    repo = tmp_path_factory.mktemp("engine-process-repo")
    (repo / MODEL_NAME / "1").mkdir(parents=True)
    (repo / MODEL_NAME / "config.pbtxt").write_text(CONFIG)
    settings = {**engine_args(tiny_model_dir), "enable_lora": False}
    for key in ("max_lora_rank", "max_loras"):
        settings.pop(key)
    (repo / MODEL_NAME / "1" / "model.json").write_text(json.dumps(settings, indent=2))
    # The same model served in the stub's own process, to compare with.
    (repo / IN_STUB / "1").mkdir(parents=True)
    (repo / IN_STUB / "config.pbtxt").write_text('backend: "vllm"\ninstance_group [ { count: 1, kind: KIND_CPU } ]\n')
    (repo / IN_STUB / "1" / "model.json").write_text(json.dumps(settings, indent=2))
    logs = tmp_path_factory.mktemp("engine-process-logs")
    loads = ["--model-control-mode=explicit", f"--load-model={MODEL_NAME}", f"--load-model={IN_STUB}"]
    with ready_server(bundled_server(repo, logs, loads), logs, "the engine-process server") as server:
        yield server


def engine_pid(server) -> int:
    """The engine's process of the model's latest load."""
    return int(READY.findall(server.log_text())[-1])


def test_the_engine_runs_in_a_process_of_its_own_and_answers_as_in_the_stub(split):
    pid = engine_pid(split)
    assert pid != split.process.pid and alive(pid)
    body = {
        "text_input": "The capital of France",
        "sampling_parameters": json.dumps({"max_tokens": 12, "temperature": 0}),
    }
    status, here = generate(split, body)
    assert status == 200, here
    status, text = http(split, f"/v2/models/{IN_STUB}/generate", body)
    in_stub = json.loads(text)
    assert status == 200, in_stub
    assert here["text_output"] == in_stub["text_output"]  # greedy: the same engine, the same text
    events = generate_stream(split, {**body, "stream": True})
    assert "".join(e["text_output"] for e in events) == here["text_output"].removeprefix(body["text_input"])


def test_additional_outputs_and_the_final_flag_on_the_last_response(split):
    results, error = grpc_stream(
        split, "Hello", {"max_tokens": 6, "ignore_eos": True, "logprobs": 1}, stream=True,
        return_num_output_tokens=True, return_finish_reason=True, return_logprobs=True,
    )  # fmt: skip
    assert error is None and results and is_final(results[-1])
    assert not any(is_final(r) for r in results[:-1])
    counts = [int(r.as_numpy("num_output_tokens")[0]) for r in results]
    assert sum(counts) == 6
    assert results[-1].as_numpy("finish_reason")[0].decode() == "length"
    logprobs = [json.loads(r.as_numpy("logprobs")[0]) for r in results]
    assert sum(len(entry) for entry in logprobs) == 6


def test_bad_requests_are_refused_in_the_stub(split):
    status, body = generate(split, {"text_input": "Hi", "sampling_parameters": json.dumps({"temprature": 1})})
    assert status == 400 and 'did you mean "temperature"' in body["error"], body


@pytest.fixture
def gateway(split):
    """`vllm-repo openai` in front of the module's Triton, its stream socket on: the base URL."""
    port = free_port()
    command = [sys.executable, "-m", "vllm_repo", "openai", "--triton-url", split.http_url, "--port", str(port)]
    command += ["--triton-grpc-port", split.grpc_url.rsplit(":", 1)[1], "--stream-socket", "on"]
    proc = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    guardian = Guardian(proc.pid, None)  # stops the gateway should the test runner die first
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        guardian.release()
        assert proc.wait(timeout=20) == 0


def test_openai_requests_are_answered_by_vllms_app_in_the_engine_process_and_stream_over_the_gateways_socket(
    split, gateway
):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=gateway, api_key="EMPTY", max_retries=0, timeout=120)
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    asked = {"model": MODEL_NAME, "messages": chat, "max_tokens": 10, "temperature": 0}
    whole = client.chat.completions.create(**asked, extra_body={"ignore_eos": True})
    chunks = list(
        client.chat.completions.create(
            **asked, stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True}
        )
    )
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(deltas) == whole.choices[0].message.content and len(deltas) > 2
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == 10
    # The engine's process connected to the gateway's socket and wrote the stream there itself.
    connected = r"engine_process \d+\] \[vllm\] streamed OpenAI responses go to the gateway's socket"
    assert re.search(connected, split.log_text())

    # A client leaving mid-stream: the gateway says so over the socket, and the request stops in the engine.
    aborted = split.log_text().count("cancelled by the client: aborted in the engine")
    stream = client.chat.completions.create(
        **{**asked, "max_tokens": 480}, stream=True, extra_body={"ignore_eos": True}
    )  # fmt: skip
    for _, _chunk in zip(range(3), stream, strict=False):
        pass
    stream.close()
    deadline = time.monotonic() + 15
    while split.log_text().count("cancelled by the client: aborted in the engine") == aborted:
        assert time.monotonic() < deadline, "the request the client left was not aborted in the engine"
        time.sleep(0.1)


def test_cancellation_mid_stream_aborts_the_request_in_the_engine(split):
    cancel_mid_stream(split)
    # The engine is free again: a new request is answered in full.
    results, error = grpc_stream(split, "Hi", {"max_tokens": 3, "ignore_eos": True}, stream=True)
    assert error is None and is_final(results[-1])


def test_metrics_are_recorded_in_the_engine_process_and_reported_before_the_final_response(split):
    wait_metrics_flushed()
    before = scrape_metrics(split)
    counts = []
    for max_tokens in (10, 7):
        results, error = grpc_stream(
            split, "Count me", {"max_tokens": max_tokens, "ignore_eos": True}, stream=True,
            return_num_input_tokens=True,
        )  # fmt: skip
        assert error is None and is_final(results[-1])
        counts.append(int(results[0].as_numpy("num_input_tokens")[0]))
    after = scrape_metrics(split)  # at once: each final response went out after its request's stats were reported

    def delta(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)

    assert delta("vllm:generation_tokens_total") == 17
    assert delta("vllm:prompt_tokens_total") == sum(counts)
    assert delta("vllm:request_success_total", finished_reason="length") == 2
    assert delta("vllm:e2e_request_latency_seconds_count") == 2
    assert delta("vllm:request_generation_tokens_sum") == 17
    assert delta("vllm:time_per_output_token_seconds_count") == 17 - 2  # one per token after each first
    # REPORT_HISTOGRAMS_PER_VALUE: Triton's histogram metrics, one observation a value, as Triton's own vLLM backend.
    types = metric_types(metrics_text(split))
    assert types["vllm:time_per_output_token_seconds"] == types["vllm:e2e_request_latency_seconds"] == "histogram"
    wait_metrics_flushed()
    idle = scrape_metrics(split)
    assert metric(idle, "vllm:num_requests_running") == 0 and metric(idle, "vllm:num_requests_waiting") == 0
    assert 0 <= metric(idle, "vllm:kv_cache_usage_perc") <= 1


def test_one_response_per_token_is_split_in_the_engine_process(split):
    name = "per_token"
    (split.model_repository / name / "1").mkdir(parents=True)
    (split.model_repository / name / "config.pbtxt").write_text(
        CONFIG + 'parameters { key: "STREAM_ONE_RESPONSE_PER_TOKEN" value: { string_value: "true" } }\n'
    )
    model_json = (split.model_repository / MODEL_NAME / "1" / "model.json").read_text()
    (split.model_repository / name / "1" / "model.json").write_text(model_json)
    status, text = http(split, f"/v2/repository/models/{name}/load", {}, timeout=300)
    assert status == 200, text
    try:
        body = {
            "text_input": "Hello world",
            "sampling_parameters": json.dumps({"max_tokens": 16, "temperature": 0, "ignore_eos": True}),
        }
        status, text = http(
            split, f"/v2/models/{name}/generate_stream", {**body, "stream": True, "return_num_output_tokens": True}
        )
        assert status == 200, text
        events = [json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: ")]
        assert [e["num_output_tokens"] for e in events] == [1] * 16
        status, text = http(split, f"/v2/models/{IN_STUB}/generate", {**body, "exclude_input_in_output": True})
        assert status == 200, text
        assert "".join(e["text_output"] for e in events) == json.loads(text)["text_output"]
    finally:
        http(split, f"/v2/repository/models/{name}/unload", {}, timeout=120)


def test_unloading_stops_the_engine_process_and_loading_starts_a_new_one(split):
    before = engine_pid(split)
    status, text = http(split, f"/v2/repository/models/{MODEL_NAME}/unload", {})
    assert status == 200, text
    deadline = time.monotonic() + 60
    while alive(before):
        assert time.monotonic() < deadline, "the engine's process outlived its model"
        time.sleep(0.2)
    loads = len(READY.findall(split.log_text()))
    status, text = http(split, f"/v2/repository/models/{MODEL_NAME}/load", {})
    assert status == 200, text
    # The stub's log lines reach the server's log through a thread of its own: the load can answer first.
    wait_for(lambda: len(READY.findall(split.log_text())) > loads)
    after = engine_pid(split)
    assert after != before and alive(after)
    status, body = generate(split, {"text_input": "Hi", "sampling_parameters": json.dumps({"max_tokens": 2})})
    assert status == 200, body


def test_the_engine_process_killed_is_the_engine_dead_and_the_model_is_unloaded(split):
    pid = engine_pid(split)
    # What the engine's group has in /dev/shm that the server's processes do not (vLLM's EngineCore's semaphores):
    # killed outright, nobody else would remove it.
    engines = engine_stop.shared_memory_of(engine_stop.group_members(pid))
    server_own = engine_stop.shared_memory_of(engine_stop.group_members(split.pgid))
    left_to_remove = engines - server_own
    assert left_to_remove, "the engine's processes map nothing of their own in /dev/shm"
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while "the vLLM engine has died" not in split.log_text():
        assert time.monotonic() < deadline, "the backend did not see its engine's process die"
        time.sleep(0.2)
    assert "its process was killed by SIGKILL" in split.log_text()
    # ENABLE_VLLM_HEALTH_CHECK: the model is unloaded, and the server stays up.
    deadline = time.monotonic() + 60
    while http(split, f"/v2/models/{MODEL_NAME}/ready")[0] == 200:
        assert time.monotonic() < deadline, "the model was not unloaded"
        time.sleep(0.2)
    assert http(split, "/v2/health/live")[0] == 200
    assert sorted(path for path in left_to_remove if os.path.exists(path)) == []
