"""ENGINE_PROCESS: the bundled backend with vLLM in a process of its own, in a real Triton server (2.51) with real
vLLM on the CPU. What a client sees must be what it sees in the stub's own process (test_backend_e2e.py): the same
greedy text, the same outputs and errors, cancellation, and the engine's death.

One server for the module; the last test is destructive (the engine's process killed)."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest

from tests.backend.conftest import MODEL_NAME, SERVER_ENV, engine_args
from tests.backend.test_backend_e2e import (
    cancel_mid_stream,
    generate,
    generate_stream,
    grpc_stream,
    http,
    is_final,
)
from tests.serving_env import SERVING_PYTHON, TRITON_HOME, needs_serving
from vllm_repo.serve.server import TritonServer

pytestmark = [pytest.mark.e2e, needs_serving]

grpcclient = pytest.importorskip("tritonclient.grpc")

CONFIG = """\
backend: "vllm"
instance_group [ { count: 1, kind: KIND_CPU } ]
parameters { key: "ENGINE_PROCESS" value: { string_value: "true" } }
parameters { key: "ENABLE_VLLM_HEALTH_CHECK" value: { string_value: "true" } }
parameters { key: "DEFAULT_MAX_TOKENS" value: { string_value: "24" } }
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
    server = TritonServer(
        repo,
        serving_python=SERVING_PYTHON,
        triton_home=TRITON_HOME,
        env=SERVER_ENV,
        extra_args=["--model-control-mode=explicit", f"--load-model={MODEL_NAME}", f"--load-model={IN_STUB}"],
        log_path=tmp_path_factory.mktemp("engine-process-logs") / "tritonserver.log",
    )
    with server:
        server.wait_ready(timeout=600)
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


def test_bad_requests_are_refused_in_the_stub_and_openai_requests_are_not_served(split):
    status, body = generate(split, {"text_input": "Hi", "sampling_parameters": json.dumps({"temprature": 1})})
    assert status == 400 and 'did you mean "temperature"' in body["error"], body
    envelope = json.dumps({"endpoint": "/v1/completions", "body": {"prompt": "Hi"}})
    status, body = generate(split, {"text_input": "", "openai_request": envelope})
    assert status != 200 and "not served with ENGINE_PROCESS" in body["error"], body


def test_cancellation_mid_stream_aborts_the_request_in_the_engine(split):
    cancel_mid_stream(split)
    # The engine is free again: a new request is answered in full.
    results, error = grpc_stream(split, "Hi", {"max_tokens": 3, "ignore_eos": True}, stream=True)
    assert error is None and is_final(results[-1])


def test_settings_it_does_not_serve_stop_the_load_with_the_reason(split, tmp_path):
    refused = split.model_repository / "refused"
    (refused / "1").mkdir(parents=True)
    (refused / "config.pbtxt").write_text(
        CONFIG + 'parameters { key: "STREAM_ONE_RESPONSE_PER_TOKEN" value: { string_value: "true" } }\n'
    )
    (refused / "1" / "model.json").write_text((split.model_repository / MODEL_NAME / "1" / "model.json").read_text())
    status, text = http(split, "/v2/repository/models/refused/load", {})
    assert status == 400 and "ENGINE_PROCESS does not serve STREAM_ONE_RESPONSE_PER_TOKEN" in text, text


def test_unloading_stops_the_engine_process_and_loading_starts_a_new_one(split):
    before = engine_pid(split)
    status, text = http(split, f"/v2/repository/models/{MODEL_NAME}/unload", {})
    assert status == 200, text
    deadline = time.monotonic() + 60
    while alive(before):
        assert time.monotonic() < deadline, "the engine's process outlived its model"
        time.sleep(0.2)
    status, text = http(split, f"/v2/repository/models/{MODEL_NAME}/load", {})
    assert status == 200, text
    after = engine_pid(split)
    assert after != before and alive(after)
    status, body = generate(split, {"text_input": "Hi", "sampling_parameters": json.dumps({"max_tokens": 2})})
    assert status == 200, body


def test_the_engine_process_killed_is_the_engine_dead_and_the_model_is_unloaded(split):
    pid = engine_pid(split)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while "the vLLM engine has died" not in split.log_text():
        assert time.monotonic() < deadline, "the backend did not see its engine's process die"
        time.sleep(0.2)
    assert "its process exited (-9)" in split.log_text()
    # ENABLE_VLLM_HEALTH_CHECK: the model is unloaded, and the server stays up.
    deadline = time.monotonic() + 60
    while http(split, f"/v2/models/{MODEL_NAME}/ready")[0] == 200:
        assert time.monotonic() < deadline, "the model was not unloaded"
        time.sleep(0.2)
    assert http(split, "/v2/health/live")[0] == 200
