"""The parity request list against vLLM's own OpenAI server: it runs, and it is self-consistent (two runs agree to
the last logprob bit, streams reassemble to their non-streamed twins, constrained outputs parse)."""

from __future__ import annotations

import copy
import json
import urllib.request
from pathlib import Path

import jsonschema
import pytest

from bench.lib.reference_server import ReferenceServer
from tests.support.launch import ipc_sockets, orphaned_ipc_sockets
from tests.support.openai_parity import CITY_SCHEMA, REQUESTS, TIME_TOOL, WEATHER_TOOL, compare, run_all
from tests.support.serving import SERVING_PYTHON
from vllm_repo.serve.processes import process_group_members

pytestmark = pytest.mark.e2e

FRAMEWORK_ERRORS = {
    "error/no-such-path": {"detail": "Not Found"},
    "error/wrong-method": {"detail": "Method Not Allowed"},
    "error/models-by-post": {"detail": "Method Not Allowed"},
}


@pytest.fixture(scope="module")
def runs(reference_url):
    return run_all(reference_url), run_all(reference_url)


@pytest.fixture(scope="module")
def seen(runs):
    return {o.name: o for o in runs[0]}


def test_every_request_gets_the_status_vllm_gives(seen):
    got = {r.name: seen[r.name].status for r in REQUESTS}
    assert got == {r.name: r.expect_status for r in REQUESTS}


def test_two_runs_are_identical(runs):
    assert compare(*runs) == []


def test_compare_sees_a_changed_text(runs):
    first, second = runs[0], copy.deepcopy(runs[1])
    obs = next(o for o in second if o.choices)
    before = obs.choices[0]["text"]
    obs.choices[0]["text"] += "!"
    before, after = (json.dumps(t, ensure_ascii=False) for t in (before, obs.choices[0]["text"]))
    assert compare(first, second) == [f"{obs.name}: choices[0].text: {before} != {after}"]


def _twins(seen, endpoints):
    return [
        (seen[n.removesuffix("/stream")], o)
        for n, o in seen.items()
        if n.endswith("/stream") and o.status == 200 and o.endpoint in endpoints
    ]


def test_streams_reassemble_to_their_non_streamed_twin(seen):
    twins = _twins(seen, ("chat", "completions"))
    assert len(twins) > 20
    for plain, streamed in twins:
        if "/tool_" in plain.name:
            continue  # vLLM parses a whole answer and a stream of deltas differently; compared across servers only
        for a, b in zip(plain.choices, streamed.choices, strict=True):
            assert (a["text"], a["finish_reason"], a["logprobs"]) == (b["text"], b["finish_reason"], b["logprobs"])
        counts = ("prompt_tokens", "completion_tokens", "total_tokens")
        assert {k: plain.usage[k] for k in counts} == {k: streamed.usage[k] for k in counts}, plain.name


def test_a_responses_stream_completes_with_its_non_streamed_twins_answer(seen):
    twins = _twins(seen, ("responses",))
    assert len(twins) == 3
    for plain, streamed in twins:
        assert streamed.events[0] == "response.created" and streamed.events[-1] == "response.completed"
        assert "response.output_text.delta" in streamed.events
        assert streamed.response["output"] == plain.response["output"], plain.name
        assert streamed.response["usage"] == plain.response["usage"], plain.name


def test_a_messages_stream_ends_with_its_non_streamed_twins_message(seen):
    twins = _twins(seen, ("messages",))
    assert len(twins) == 2
    for plain, streamed in twins:
        assert streamed.events[0] == "message_start" and streamed.events[-1] == "message_stop"
        assert "content_block_delta" in streamed.events
        keys = ("content", "stop_reason", "usage")
        assert {k: streamed.response[k] for k in keys} == {k: plain.response[k] for k in keys}, plain.name
    stopped = seen["messages/stop_sequences"].response
    assert (stopped["stop_reason"], stopped["stop_sequence"]) == ("stop_sequence", " 100")
    assert seen["messages/count_tokens"].response["input_tokens"] > 0


def test_messages_errors_are_anthropic_error_objects(seen):
    errors = [obs for obs in seen.values() if obs.endpoint == "messages" and obs.status != 200]
    assert len(errors) == 2
    for obs in errors:
        assert obs.error["type"] == "error" and obs.error["error"]["message"], obs.name
    assert seen["error/messages-unknown-model"].error["error"]["type"] == "NotFoundError"


def test_tokenize_counts_its_tokens(seen):
    for name in ("tokenize", "tokenize/chat"):
        answer = seen[name].response
        assert answer["count"] == len(answer["tokens"]) > 0 and answer["max_model_len"] == 512
    assert isinstance(seen["detokenize"].response["prompt"], str)


def test_stream_usage_comes_once_in_a_last_chunk_of_its_own(seen):
    for obs in seen.values():
        if obs.stream and obs.status == 200 and obs.endpoint in ("chat", "completions"):
            assert obs.stream_info == {"usage_chunks": 1, "last_chunk_has_choices": False, "chunks": True}, obs.name


def test_token_counts_and_logprobs_agree(seen):
    obs = seen["chat/logprobs"]
    (choice,) = obs.choices
    assert len(choice["logprobs"]) == obs.usage["completion_tokens"] == 8
    assert all(len(t["top_logprobs"]) == 3 for t in choice["logprobs"])
    # Token strings show a partial UTF-8 character as nothing; their bytes carry it.
    assert all(isinstance(t["bytes"], list) for t in choice["logprobs"])
    completion = seen["completion/logprobs"].choices[0]["logprobs"]
    assert len(completion["tokens"]) == len(completion["top_logprobs"]) == 8


def test_n_and_stop(seen):
    assert len(seen["chat/n3-seeded"].choices) == 3
    assert len(set(seen["chat/n3-seeded"].texts())) == 3
    assert [c["finish_reason"] for c in seen["chat/stop"].choices] == ["stop"]
    assert seen["chat/stop"].choices[0]["stop_reason"] == " 100"
    assert seen["chat/max_completion_tokens"].usage["completion_tokens"] == 12
    clamped = seen["chat/max_tokens-clamped"].usage
    assert clamped["prompt_tokens"] + clamped["completion_tokens"] == 512


def test_json_outputs_parse_and_validate(seen):
    for name in ("chat/json_object", "chat/json_object/stream"):
        assert isinstance(json.loads(seen[name].choices[0]["text"]), dict)
    complete = 0
    for name, obs in seen.items():
        if name.startswith("chat/json_schema"):
            (choice,) = obs.choices
            if choice["finish_reason"] == "stop":
                jsonschema.validate(json.loads(choice["text"]), CITY_SCHEMA)
                complete += 1
    assert complete == 2  # the seeded request, streamed and not


@pytest.mark.parametrize("name", ["chat/tool_named", "chat/tool_named/stream", "chat/tool_required"])
def test_forced_tool_calls_have_json_arguments_of_the_tool(seen, name):
    (choice,) = seen[name].choices
    (call,) = choice["tool_calls"]
    assert (call["type"], call["name"]) == ("function", "weather")
    jsonschema.validate(json.loads(call["arguments"]), WEATHER_TOOL["function"]["parameters"])
    if name == "chat/tool_required":
        assert choice["finish_reason"] == "tool_calls"


def test_a_loose_tool_gets_any_json(seen):
    (call,) = seen["chat/tool_named-loose"].choices[0]["tool_calls"]
    assert call["name"] == TIME_TOOL["function"]["name"]
    json.loads(call["arguments"])


def test_errors_are_openai_error_objects(seen):
    for obs in seen.values():
        if obs.status != 200 and obs.name not in FRAMEWORK_ERRORS and obs.endpoint != "messages":
            assert isinstance(obs.error, dict), obs.name
            assert isinstance(obs.error["message"], str) and obs.error["message"], obs.name
            assert obs.error["code"] == obs.status, obs.name
    assert seen["error/unknown-model"].error["type"] == "NotFoundError"
    # What FastAPI answers itself, before vLLM: a path or method the server does not have.
    assert {name: seen[name].error for name in FRAMEWORK_ERRORS} == FRAMEWORK_ERRORS
    assert (seen["error/wrong-method"].allow, seen["error/models-by-post"].allow) == ("POST", "GET")
    assert "512" in seen["error/chat-over-context"].error["message"]


def test_the_server_leaves_nothing_behind(tiny_model, tmp_path):
    server = ReferenceServer(SERVING_PYTHON, tiny_model, log_path=tmp_path / "api_server.log")
    sockets_before = ipc_sockets()
    with server:
        server.wait_ready(timeout=600)
        workdir = server.environment()["TMPDIR"]
        with urllib.request.urlopen(server.base_url + "/models", timeout=30) as resp:
            assert json.load(resp)["data"][0]["id"] == "tiny"
        pgid = server.pgid
    print(f"ready after {server.ready_after_s:.1f} s; removed {server.removed}")
    assert server.leftovers == []
    assert process_group_members(pgid) == []
    assert not Path(workdir).exists()
    assert orphaned_ipc_sockets(sockets_before) == set()  # vLLM's sockets went with the work directory
