"""OpenAI requests through the bundled backend: vLLM's own OpenAI layer on the backend's engine, reached through real
Triton gRPC streams the way the OpenAI gateway sends them (``text_input`` "" and ``openai_request``).

The answers are compared with those of ``vllm serve`` itself (vLLM's OpenAI API server, started beside Triton with the
same engine arguments, model name, adapter and chat template), not with strings written here. Every test runs against
both shapes of the backend: vLLM in the stub's process, and in a process of its own (ENGINE_PROCESS).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.support.backend_server import CONFIG_PBTXT, SERVER_ENV, bundled_server, engine_args
from tests.support.launch import ipc_sockets, orphaned_ipc_sockets
from tests.support.serving import SERVING_PYTHON, needs_serving
from tests.support.stacks import ready_server
from vllm_repo.serve.guardian import Guardian
from vllm_repo.serve.ports import free_port
from vllm_repo.serve.server import RPC_PATH_ENV

pytestmark = [pytest.mark.e2e, needs_serving]

grpcclient = pytest.importorskip("tritonclient.grpc")

MODEL = "tiny"
ADAPTER = "doll"
BAD_MODEL = "bad_openai"  # its openai.json has a misspelt key: it must fail to load, naming the file and the key
CHAT_TEMPLATE = "chat.jinja"  # in the version directory, named relatively in openai.json
MESSAGES = [{"role": "user", "content": "Hello there"}]
ENGINE_PROCESS_PARAMETER = 'parameters { key: "ENGINE_PROCESS" value: { string_value: "true" } }\n'


def _serve_flags(settings: dict) -> list[str]:
    flags = []
    for key, value in settings.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is not False:
            flags += [flag, str(value)]
    return flags


@pytest.fixture(scope="module")
def model_repository(tiny_model_dir, tmp_path_factory):
    """The model (with its adapter, chat template and openai.json) and one whose openai.json has a typo."""
    repo = tmp_path_factory.mktemp("openai-repo")
    version = repo / MODEL / "1"
    version.mkdir(parents=True)
    (repo / MODEL / "config.pbtxt").write_text(CONFIG_PBTXT)
    settings = engine_args(tiny_model_dir)
    (version / "model.json").write_text(json.dumps(settings))
    shutil.copytree(f"{tiny_model_dir}-lora", version / "adapters" / ADAPTER)
    (version / "multi_lora.json").write_text(json.dumps({ADAPTER: "adapters/" + ADAPTER}))
    # The model's own template with a marker, so that its use shows in the prompt's token count.
    template = (tiny_model_dir / "chat_template.jinja").read_text()
    (version / CHAT_TEMPLATE).write_text("Triton says: " + template)
    (version / "openai.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE, "response_role": "assistant"}))
    bad = repo / BAD_MODEL / "1"
    bad.mkdir(parents=True)
    (repo / BAD_MODEL / "config.pbtxt").write_text(CONFIG_PBTXT)
    (bad / "model.json").write_text(json.dumps({**settings, "enable_lora": False, "max_lora_rank": 8}))
    (bad / "openai.json").write_text(json.dumps({"tool_call_parsr": "hermes"}))
    return repo


@pytest.fixture(scope="module")
def reference(model_repository, tiny_model_dir, tmp_path_factory):
    """vllm serve's URL, serving the model as Triton does."""
    version = model_repository / MODEL / "1"
    settings = engine_args(tiny_model_dir)
    logs = tmp_path_factory.mktemp("openai-logs")
    # vLLM's ZMQ IPC sockets are files, in the temporary directory unless told: here, with the test's other files.
    rpc = tmp_path_factory.mktemp("vllm-serve-rpc")
    sockets_before = ipc_sockets()
    port = free_port()
    reference_log = open(logs / "vllm-serve.log", "wb")  # noqa: SIM115 - closed below
    reference = subprocess.Popen(
        [
            SERVING_PYTHON,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(tiny_model_dir),
            *_serve_flags({k: v for k, v in settings.items() if k != "model"}),
            *("--served-model-name", MODEL, "--lora-modules", f"{ADAPTER}={version / 'adapters' / ADAPTER}"),
            *("--chat-template", str(version / CHAT_TEMPLATE), "--port", str(port), "--host", "127.0.0.1"),
        ],
        env={
            **os.environ,
            **SERVER_ENV,
            "PATH": f"{Path(SERVING_PYTHON).parent}:{os.environ['PATH']}",
            RPC_PATH_ENV: str(rpc),
        },
        stdout=reference_log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    # Should the test runner die without the finally below, this stops the reference's process group.
    reference_guardian = Guardian(reference.pid, None)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while http(url, "/health")[0] != 200:
            assert reference.poll() is None, (logs / "vllm-serve.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "vllm serve did not start"
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(reference.pid, 15)
        try:
            reference.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(reference.pid, 9)
        reference_log.close()
        reference_guardian.release()
    assert orphaned_ipc_sockets(sockets_before) == set()  # it left none in /tmp


@pytest.fixture(scope="module", params=["in_stub", "engine_process"])
def triton(request, model_repository, tmp_path_factory):
    """Triton with the bundled backend, vLLM in the stub's process or in a process of its own."""
    shape = ENGINE_PROCESS_PARAMETER if request.param == "engine_process" else ""
    for model in (MODEL, BAD_MODEL):
        (model_repository / model / "config.pbtxt").write_text(CONFIG_PBTXT + shape)
    sockets_before = ipc_sockets()
    logs = tmp_path_factory.mktemp(f"openai-logs-{request.param}")
    make = bundled_server(model_repository, logs, ["--model-control-mode=explicit", f"--load-model={MODEL}"])
    with ready_server(make, logs, "the OpenAI backend's server") as server:
        yield server
    assert orphaned_ipc_sockets(sockets_before) == set()  # it left none in /tmp


# -- clients ---------------------------------------------------------------------------------------------------------


def http(url: str, path: str, body: dict | None = None, timeout: float = 120) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"{url}{path}", data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError):
        return 0, b""


def openai_inputs(endpoint: str, body: dict | None = None) -> list:
    envelope = {"endpoint": endpoint} if body is None else {"endpoint": endpoint, "body": body}
    inputs = []
    for name, value in (("text_input", b""), ("openai_request", json.dumps(envelope).encode())):
        tensor = grpcclient.InferInput(name, [1], "BYTES")
        tensor.set_data_from_numpy(np.array([value], dtype=np.object_))
        inputs.append(tensor)
    return inputs


def is_final(result) -> bool:
    param = result.get_response().parameters.get("triton_final_response")
    return bool(param and param.bool_param)


def via_triton(server, endpoint: str, body: dict | None = None, timeout: float = 120) -> tuple[int, list[bytes]]:
    """(status, the bytes of each response) of one OpenAI request over a gRPC stream, as the gateway sends it.
    enable_empty_final_response would show an empty final response if the backend sent one."""
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        client.async_stream_infer(MODEL, openai_inputs(endpoint, body), enable_empty_final_response=True)
        statuses, parts = set(), []
        while True:
            result, error = responses.get(timeout=timeout)
            assert error is None, error
            statuses.add(int(result.as_numpy("openai_status")[0]))
            parts.append(bytes(result.as_numpy("openai_response")[0]))
            if is_final(result):
                break
        assert len(statuses) == 1, statuses  # every response carries the status
        return statuses.pop(), parts
    finally:
        client.stop_stream()
        client.close()


def events(data: bytes) -> list[str]:
    """The data of each SSE event, in order ("[DONE]" included)."""
    text = data.decode()
    assert text.endswith("\n\n"), text[-200:]
    found = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        found.append(block[len("data: ") :])
    return found


# Fields that differ between any two answers of vLLM itself: ids and times.
_VOLATILE = {"id", "created"}


def normalized(value):
    if isinstance(value, dict):
        return {k: normalized(v) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [normalized(v) for v in value]
    return value


def both(triton, reference, endpoint: str, body: dict | None = None) -> tuple[tuple[int, bytes], tuple[int, bytes]]:
    status, parts = via_triton(triton, endpoint, body)
    return (status, b"".join(parts)), http(reference, endpoint, body)


def metrics(server) -> dict[str, float]:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as resp:
        text = resp.read().decode()
    values = {}
    for line in text.splitlines():
        if line.startswith("vllm:") and f'model="{MODEL}"' in line:
            key, _, value = line.rpartition(" ")
            values[key.split("{")[0]] = float(value)
    return values


# -- tests -----------------------------------------------------------------------------------------------------------


def test_models_lists_the_triton_model_and_its_adapter_as_vllm_serve_does(triton, reference):
    (status, data), (ref_status, ref_data) = both(triton, reference, "/v1/models")
    assert status == ref_status == 200
    listed = json.loads(data)
    assert [m["id"] for m in listed["data"]] == [MODEL, ADAPTER]
    assert listed["data"][1]["parent"] == MODEL
    assert normalized(listed) == normalized(json.loads(ref_data))


def test_chat_completion_is_vllm_serves_answer(triton, reference):
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 8, "temperature": 0}
    (status, data), (ref_status, ref_data) = both(triton, reference, "/v1/chat/completions", body)
    assert status == ref_status == 200, data
    answer = json.loads(data)
    assert answer["object"] == "chat.completion"
    assert answer["model"] == MODEL
    # The chat template of openai.json (a path relative to the version directory) is the one in use: the prompt
    # has as many tokens as vllm serve's with the same template.
    assert normalized(answer) == normalized(json.loads(ref_data))


def test_chat_stream_is_sse_ending_in_done_with_usage(triton, reference):
    body = {
        "model": MODEL,
        "messages": MESSAGES,
        "max_tokens": 12,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, parts = via_triton(triton, "/v1/chat/completions", body)
    assert status == 200
    for part in parts[:-1]:
        assert part and events(part)  # every response holds whole events (joined ones too)
    found = events(b"".join(parts))
    assert found[-1] == "[DONE]"
    chunks = [json.loads(e) for e in found[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-1]["usage"]["completion_tokens"] == 12
    ref_status, ref_data = http(reference, "/v1/chat/completions", body)
    assert ref_status == 200
    ref_chunks = [json.loads(e) for e in events(ref_data)[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    ref_text = "".join(c["choices"][0]["delta"].get("content") or "" for c in ref_chunks if c["choices"])
    assert text == ref_text
    assert normalized(chunks[-1]) == normalized(ref_chunks[-1])  # the usage chunk


def test_completion_and_an_adapter_by_model_name(triton, reference):
    for model in (MODEL, ADAPTER):
        body = {"model": model, "prompt": "Once upon a time", "max_tokens": 6, "temperature": 0}
        (status, data), (ref_status, ref_data) = both(triton, reference, "/v1/completions", body)
        assert status == ref_status == 200, data
        assert json.loads(data)["model"] == model
        assert normalized(json.loads(data)) == normalized(json.loads(ref_data))


def test_completion_stream(triton, reference):
    body = {"model": ADAPTER, "prompt": "Once", "max_tokens": 5, "temperature": 0, "stream": True}
    status, parts = via_triton(triton, "/v1/completions", body)
    assert status == 200
    found = events(b"".join(parts))
    assert found[-1] == "[DONE]"
    ref_found = events(http(reference, "/v1/completions", body)[1])
    text = lambda evs: "".join(json.loads(e)["choices"][0]["text"] for e in evs[:-1])  # noqa: E731
    assert text(found) == text(ref_found)


@pytest.mark.parametrize(
    "endpoint, body, expected_status",
    [
        ("/v1/chat/completions", {"model": MODEL, "messages": MESSAGES, "temperature": "hot"}, 400),
        ("/v1/completions", {"model": MODEL, "prompt": "Hi", "n": 0}, 400),
        ("/v1/completions", {"model": MODEL, "prompt": "hi " * 600, "max_tokens": 3}, 400),
        ("/v1/chat/completions", {"model": MODEL, "messages": "not a list"}, 400),
        ("/v1/chat/completions", {"model": "nope", "messages": MESSAGES}, 404),
        ("/v1/completions", {"model": "nope", "prompt": "Hi", "stream": True}, 404),
    ],
    ids=["bad-type", "n-0", "over-context", "bad-messages", "unknown-model", "unknown-model-stream"],
)
def test_errors_are_vllm_serves_status_and_body(triton, reference, endpoint, body, expected_status):
    status, parts = via_triton(triton, endpoint, body)
    assert len(parts) == 1  # one final response, even for a stream
    ref_status, ref_data = http(reference, endpoint, body)
    assert status == ref_status == expected_status
    assert json.loads(parts[0]) == json.loads(ref_data)
    assert parts[0] == ref_data  # byte for byte


def test_a_malformed_envelope_or_endpoint_is_answered_in_vllms_error_shape(triton):
    status, parts = via_triton(triton, "/v1/embeddings", {"model": MODEL, "input": "x"})
    assert status == 404
    error = json.loads(parts[0])["error"]
    assert error["code"] == 404 and "/v1/chat/completions" in error["message"]


def test_cancellation_mid_stream_aborts_the_request_in_the_engine(triton):
    body = {"model": MODEL, "prompt": "Hello", "max_tokens": 480, "ignore_eos": True, "stream": True}
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    client.async_stream_infer(MODEL, openai_inputs("/v1/completions", body))
    for _ in range(3):
        result, error = responses.get(timeout=60)
        assert error is None and int(result.as_numpy("openai_status")[0]) == 200
    client.stop_stream(cancel_requests=True)
    client.close()
    deadline = time.monotonic() + 15
    while True:
        time.sleep(0.3)
        now = metrics(triton)
        if now["vllm:num_requests_running"] == 0:
            break
        assert time.monotonic() < deadline, "the cancelled request still runs in the engine"
    generated = now["vllm:generation_tokens_total"]
    time.sleep(1)
    assert metrics(triton)["vllm:generation_tokens_total"] == generated  # nothing generates for nobody
    assert "cancelled by the client: aborted in the engine" in triton.log_text()


def test_health_is_200_while_the_engine_lives(triton):
    assert via_triton(triton, "/health") == (200, [b""])


def test_a_native_request_still_works_beside_openai_ones(triton):
    responses: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(triton.grpc_url)
    client.start_stream(callback=lambda result, error: responses.put((result, error)))
    try:
        stream_body = {"model": MODEL, "prompt": "Hi", "max_tokens": 30, "ignore_eos": True, "stream": True}
        client.async_stream_infer(MODEL, openai_inputs("/v1/completions", stream_body))
        native = grpcclient.InferInput("text_input", [1], "BYTES")
        native.set_data_from_numpy(np.array([b"Hello"], dtype=np.object_))
        client.async_stream_infer(MODEL, [native])
        seen_native = seen_openai_final = False
        while not (seen_native and seen_openai_final):
            result, error = responses.get(timeout=60)
            assert error is None, error
            if result.as_numpy("text_output") is not None:
                assert bytes(result.as_numpy("text_output")[0]).startswith(b"Hello")
                seen_native = True
            elif is_final(result):
                assert bytes(result.as_numpy("openai_response")[0]).endswith(b"data: [DONE]\n\n")
                seen_openai_final = True
    finally:
        client.stop_stream()
        client.close()


def test_an_unknown_openai_json_key_fails_the_load_naming_the_file_and_the_closest_key(triton):
    status, data = http(triton.http_url, f"/v2/repository/models/{BAD_MODEL}/load", {})
    assert status != 200
    message = json.loads(data)["error"]
    assert "openai.json" in message and '"tool_call_parsr"' in message, message
    assert 'did you mean "tool_call_parser"' in message, message
